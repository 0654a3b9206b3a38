"""Issue 27 item 4: as the paper ran (two reflection calls per proposal, no repairs), an answer cut off at its
token limit or a program that does not compile is adopted and goes to the gate, charged; requests routed to
it run the frozen fallback. And the search stops at a candidate cap (the paper's candidate budget, 100)."""

from __future__ import annotations

import dspy
import pytest

from dspy_adaptive import AdaptiveGEPA
from dspy_adaptive.reflection.propose import Reflector
from tests.core import toy
from tests.core.test_repair import fixing_reflection, minibatch

BROKEN = "class A(dspy.Module)\n  pass"


@pytest.fixture(autouse=True)
def actor():
    lm = toy.actor_lm()
    with dspy.context(lm=lm):
        yield lm


@pytest.mark.parametrize("first, problem", [("syntax", "syntax error"), ("policy", "import"),
                                            ("truncated", "token limit")])
def test_gate_mode_adopts_the_answer_as_written_and_says_what_was_wrong(actor, first, problem):
    lib, rows, results = minibatch(actor)
    refl = fixing_reflection(first)
    edit = Reflector(refl, input_names=("question",), output_names=("answer",), max_repair_attempts=0,
                     unusable_programs="gate").propose(lib, rows, results)
    assert not edit.rejected and edit.child.slot(1).active
    assert problem in " ".join(edit.admitted) and edit.details()["admitted"] == list(edit.admitted)
    assert len(refl.scripted.calls) == 2                               # two reflection calls, no repair
    rejected = Reflector(fixing_reflection(first), input_names=("question",), output_names=("answer",),
                         max_repair_attempts=0).propose(lib, rows, results)
    assert rejected.rejected and rejected.failure in ("sandbox_rejected", "truncated")


def test_an_uncompilable_program_is_gated_and_charged_and_its_requests_run_the_fallback():
    train, val = toy.make_examples(4), toy.make_examples(4, offset=100)
    spent = {}
    for mode in ("reject", "gate"):
        refl = toy.reflection_lm(program_source=BROKEN)
        res = AdaptiveGEPA(toy.metric, reflection_lm=refl, max_metric_calls=40, reflection_minibatch_size=4, seed=3,
                           use_merge=False, track_stats=True, progress=False, max_idle_iterations=3,
                           max_repair_attempts=0, unusable_programs=mode, proposal_format="code").compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
        spent[mode] = dict(res.budget["by_kind"])
        reflect = [p for p in res.proposals if p["kind"] == "reflect"]
        if mode == "reject":
            assert all(p["failure"] == "sandbox_rejected" for p in reflect)
        else:
            assert reflect and all(p["failure"] in ("gate", None) for p in reflect)   # judged by the gate
            assert all("syntax error" in " ".join(p["details"]["admitted"]) for p in reflect)
    assert spent["reject"].get("child_minibatch", 0) == 0
    assert spent["gate"]["child_minibatch"] > 0                          # the child's minibatch was charged


def test_routed_requests_of_an_uncompilable_slot_run_the_fallback(actor):
    from dspy_adaptive import Library, RoutedProgram, route_of
    lib = Library.empty(2).with_slot(1, Library.empty(2).slot(1).activated(toy.ARITH_DESCRIPTION, BROKEN, "fast"))
    prog = RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=actor, deep_lm=actor)
    pred = prog(question=toy.make_examples(1)[0].question)
    route = route_of(pred)
    assert route.selected == 1 and route.executed == 0 and "does not compile" in route.fallback_reason
    prog.close()


def test_the_search_stops_at_the_candidate_cap():
    train, val = toy.make_examples(4), toy.make_examples(4, offset=100)
    res = AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(vary=True), max_metric_calls=400,
                       reflection_minibatch_size=4, seed=3, use_merge=False, track_stats=True, progress=False,
                       max_candidates=2).compile(dspy.Predict("question -> answer"), trainset=train,
                                                 valset=val).detailed_results
    assert len(res.candidates) == 2 and "candidate cap" in res.stop_reason
    with pytest.raises(Exception, match="max_candidates"):
        AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(), max_metric_calls=10, max_candidates=1)
    with pytest.raises(Exception, match="unusable_programs"):
        AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(), max_metric_calls=10, unusable_programs="keep")
