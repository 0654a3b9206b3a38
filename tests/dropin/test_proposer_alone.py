"""instruction_proposer without reflection_lm (dspy.GEPA accepts it): the configured LM selects actions, said once;
a proposer writes a new slot's description; an unusable selection falls back to gepa's round robin."""

from __future__ import annotations

import warnings

import dspy
import pytest

from dspy_adaptive import AdaptiveGEPA
from dspy_adaptive.data import InputError
from dspy_adaptive.testing import scripted_lm
from tests.core import toy
from tests.dropin.common import data


def describing_proposer(calls):
    def proposer(candidate, reflective_dataset, components_to_update):
        calls.append((list(components_to_update), dict(candidate), reflective_dataset))
        return dict.fromkeys(components_to_update, toy.ARITH_DESCRIPTION)
    return proposer


def compile_with(lm, proposer, **kw):
    train, val = data()
    params = dict(max_metric_calls=40, reflection_minibatch_size=4, seed=3, use_merge=False, track_stats=True,
                  progress=False, reflection_lm=None, instruction_proposer=proposer)
    params.update(kw)
    with dspy.context(lm=lm):
        return AdaptiveGEPA(toy.metric, **params).compile(dspy.Predict("question -> answer"), trainset=train,
                                                           valset=val)


def test_an_instruction_proposer_alone_reflects_with_the_configured_lm_and_says_so_once():
    calls, asked = [], []

    def respond(call):        # the configured LM: router, fallback, and the reflection calls
        if "action" in call.output_fields:
            asked.append("select")
            return {"action": "activate", "slot": "1"}
        if "new_program" in call.output_fields:
            asked.append("program")
            assert toy.ARITH_DESCRIPTION in call.prompt               # the program is written for the description
            return {"new_program": toy.ADD_SOURCE}
        return toy.actor_respond(call)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        res = compile_with(scripted_lm(respond, model="scripted/configured"), describing_proposer(calls))
    said = [w for w in seen if "reflection_lm is None" in str(w.message)]
    assert len(said) == 1 and "scripted/configured" in str(said[0].message)
    assert calls and calls[0][0] == ["slot1.description"]             # the proposer wrote the new slot's description
    assert asked[:2] == ["select", "program"]
    best = res.detailed_results.best_library
    assert best.active_ids() == (1,) and best.slot(1).description == toy.ARITH_DESCRIPTION
    assert best.slot(1).profile == "deep"                              # no PROFILE line: the fallback's profile
    assert max(res.detailed_results.val_aggregate_scores) == pytest.approx(1.0)
    assert res.detailed_results.usage["reflection"]["calls"] >= 2     # charged as reflection, on the configured LM
    res.close()


def test_an_unusable_selection_falls_back_to_round_robin_so_the_proposer_gets_its_turn():
    calls = []

    def respond(call):        # answers every reflection call in a shape no signature of ours parses
        if "action" in call.output_fields or "new_program" in call.output_fields:
            return "I would rather not say."
        return toy.actor_respond(call)

    res = compile_with(scripted_lm(respond), describing_proposer(calls), max_metric_calls=16)
    assert calls and calls[0][0] == ["slot1.description"]
    first = next(p for p in res.detailed_results.proposals if p["kind"] == "reflect")
    stages = [(a["stage"], a["failure"]) for a in first["details"]["attempts"]]
    assert stages[:2] == [("select", "unparseable"), ("select", "unparseable")]    # the LM's answer and its repair
    assert stages[2][0] == "select" and "round robin" in first["details"]["attempts"][2]["reason"]
    assert first["action"] == "activate" and first["failure"] == "unparseable"   # its program then failed to parse
    res.close()


def test_no_reflection_lm_and_no_proposer_is_still_refused():
    with pytest.raises(InputError, match="reflection_lm is required"):
        AdaptiveGEPA(toy.metric, max_metric_calls=10)


def test_a_proposer_without_any_lm_is_refused_before_the_search():
    with dspy.context(lm=None), pytest.raises(InputError, match="no LM is configured"):
        AdaptiveGEPA(toy.metric, max_metric_calls=10, instruction_proposer=describing_proposer([])).compile(
            dspy.Predict("question -> answer"), trainset=toy.make_examples(2))
