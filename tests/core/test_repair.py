"""Repair: a reflection answer rejected before the gate goes back to the reflection LM with the exact reason."""

from __future__ import annotations

from collections import Counter

import dspy
import pytest

from dspy_adaptive import AdaptiveGEPA, Library
from dspy_adaptive.data import make_rows
from dspy_adaptive.reflection.propose import Reflector
from dspy_adaptive.reflection.repair import Rejection, with_repairs
from dspy_adaptive.testing import Reply, scripted_lm
from tests.core import toy


@pytest.fixture(autouse=True)
def actor():
    lm = toy.actor_lm()
    with dspy.context(lm=lm):
        yield lm


def fixing_reflection(first: str = "policy", fixed: str = toy.ADD_SOURCE):
    """Activates slot 1; its first program answer is broken (`first`), and once the call carries a `problem`
    (a repair) it writes `fixed`. Depends only on the prompt."""
    def respond(call):
        fields = call.output_fields
        if "action" in fields:
            return {"action": "activate", "slot": "1"}
        repairing = call.field("problem") is not None
        if "profile" in fields:
            if repairing:
                return {"description": toy.ARITH_DESCRIPTION, "program": fixed, "profile": "fast"}
            if first == "policy":
                return {"description": toy.ARITH_DESCRIPTION, "program": toy.BAD_SOURCE, "profile": "fast"}
            if first == "syntax":
                return {"description": toy.ARITH_DESCRIPTION, "program": "class A(dspy.Module)\n  pass",
                        "profile": "fast"}
            if first == "truncated":   # parses and even compiles, but the provider says it was cut off
                return Reply({"description": toy.ARITH_DESCRIPTION, "program": toy.ADD_SOURCE, "profile": "fast"},
                             finish_reason="length")
            if first == "prose":
                return "I would write a program that adds the numbers."
        return "garbage"
    return scripted_lm(respond, model="scripted/reflection")


def minibatch(actor_lm):
    from dspy_adaptive import RoutedProgram
    from dspy_adaptive.search.budget import Budget
    from dspy_adaptive.search.evaluate import Evaluator

    lib = Library.empty(2)
    rows = list(make_rows(toy.make_examples(2), "trainset"))
    evaluator = Evaluator(RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=actor_lm,
                                        deep_lm=actor_lm), toy.metric, Budget(100))
    return lib, rows, evaluator.evaluate(lib, rows, "parent_minibatch")


@pytest.mark.parametrize("first, failure", [("policy", "sandbox_rejected"), ("syntax", "sandbox_rejected"),
                                            ("truncated", "truncated"), ("prose", "unparseable")])
def test_a_rejected_answer_is_repaired_with_its_reason_and_its_own_text(actor, first, failure):
    lib, rows, results = minibatch(actor)
    refl = fixing_reflection(first)
    edit = Reflector(refl, input_names=("question",), output_names=("answer",)).propose(lib, rows, results)
    assert not edit.rejected and edit.action == "activate" and "Adder" in edit.child.slot(1).program_source
    stages = [(a.stage, a.attempt, a.failure) for a in edit.attempts]
    assert stages == [("select", 0, None), ("activate", 0, failure), ("activate", 1, None)]
    assert edit.repairs == 1 and edit.details()["repairs"] == 1
    repair = refl.scripted.calls[-1]
    problem = repair.field("problem")
    assert problem == edit.attempts[1].reason                       # the exact reason, as recorded
    previous = repair.field("previous_answer")
    if first == "policy":
        assert "import os" in previous and "os" in problem
    if first == "truncated":
        assert "token limit" in problem and "class Adder" in previous


def test_truncated_answers_are_never_adopted_and_no_repair_means_one_call(actor):
    lib, rows, results = minibatch(actor)
    refl = fixing_reflection("truncated")
    edit = Reflector(refl, input_names=("question",), output_names=("answer",),
                     max_repair_attempts=0).propose(lib, rows, results)
    assert edit.rejected and edit.failure == "truncated" and "token limit" in edit.reason
    assert len(refl.scripted.calls) == 2                              # select + one activation answer


def test_repairs_stop_after_max_repair_attempts(actor):
    lib, rows, results = minibatch(actor)
    always_bad = toy.reflection_lm(program_source=toy.BAD_SOURCE)
    edit = Reflector(always_bad, input_names=("question",), output_names=("answer",),
                     max_repair_attempts=2).propose(lib, rows, results)
    assert edit.rejected and edit.failure == "sandbox_rejected" and "import os" in edit.rejected_source
    assert [a.attempt for a in edit.attempts if a.stage == "activate"] == [0, 1, 2]
    assert len(always_bad.scripted.calls) == 1 + 3


def test_an_unusable_selection_is_repaired_too(actor):
    lib, rows, results = minibatch(actor)

    def respond(call):
        if "action" in call.output_fields:
            if call.field("problem") is None:
                return {"action": "rewrite_program", "slot": "1"}     # slot 1 is not active: invalid target
            return {"action": "activate", "slot": "1"}
        return {"description": toy.ARITH_DESCRIPTION, "program": toy.ADD_SOURCE, "profile": "fast"}

    refl = scripted_lm(respond)
    edit = Reflector(refl, input_names=("question",), output_names=("answer",)).propose(lib, rows, results)
    assert not edit.rejected and edit.action == "activate"
    assert [(a.stage, a.failure) for a in edit.attempts][:2] == [("select", "invalid_target"), ("select", None)]
    assert "not active" in refl.scripted.calls[1].field("problem")


def test_with_repairs_does_not_repair_what_is_not_the_answers_fault():
    attempts = []
    calls = Counter()

    def run(note):
        calls["n"] += 1
        raise Rejection("no_change", "changed nothing")

    with pytest.raises(Rejection):
        with_repairs("rewrite_router", run, 3, attempts)
    assert calls["n"] == 1 and [a.failure for a in attempts] == ["no_change"]


def test_repairs_are_reflection_calls_never_scored_calls():
    train, val = toy.make_examples(4), toy.make_examples(4, offset=100)
    metric_calls = Counter()

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        metric_calls["n"] += 1
        return toy.metric(gold, pred, trace, pred_name, pred_trace)

    spent, reflection_calls = {}, {}
    for repairs in (0, 2):
        metric_calls.clear()
        refl = toy.reflection_lm(program_source=toy.BAD_SOURCE)     # every answer is refused
        res = AdaptiveGEPA(metric, reflection_lm=refl, max_metric_calls=40, reflection_minibatch_size=4, seed=3,
                           use_merge=False, track_stats=True, progress=False, max_idle_iterations=3,
                           max_repair_attempts=repairs).compile(dspy.Predict("question -> answer"), trainset=train,
                                                                valset=val).detailed_results
        spent[repairs] = (res.total_metric_calls, metric_calls["n"], dict(res.budget["by_kind"]))
        reflection_calls[repairs] = len(refl.scripted.calls)
        reflect = [p for p in res.proposals if p["kind"] == "reflect"]
        assert all(len([a for a in p["details"]["attempts"] if a["stage"] == "activate"]) == repairs + 1
                   for p in reflect)
    assert spent[0] == spent[2]                                        # the same scored calls, to the call
    assert reflection_calls[2] > reflection_calls[0]


def test_a_repaired_activation_is_gated_and_archived_with_its_attempts():
    train, val = toy.make_examples(4), toy.make_examples(4, offset=100)
    res = AdaptiveGEPA(toy.metric, reflection_lm=fixing_reflection("policy"), max_metric_calls=60,
                       reflection_minibatch_size=4, seed=3, use_merge=False, track_stats=True,
                       progress=False).compile(dspy.Predict("question -> answer"), trainset=train,
                                               valset=val).detailed_results
    accepted = [p for p in res.proposals if p["accepted"]]
    assert accepted and accepted[0]["details"]["repairs"] == 1
    assert accepted[0]["details"]["attempts"][1]["failure"] == "sandbox_rejected"
    assert len(res.candidates) >= 2 and res.val_aggregate_scores[res.best_idx] > res.val_aggregate_scores[0]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1"])
def test_max_repair_attempts_is_checked(bad):
    from dspy_adaptive.data import InputError
    with pytest.raises(InputError, match="max_repair_attempts"):
        AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(), max_metric_calls=10, max_repair_attempts=bad)
