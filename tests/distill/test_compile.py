"""AdaptiveGEPA(distill_router=...): the compiled program is served by a distilled router, and the run record
and report say what was built (or why nothing was)."""

from __future__ import annotations

import json

import dspy
import pytest

from dspy_adaptive import AdaptiveGEPA, load_run, route_of
from dspy_adaptive.data import InputError
from dspy_adaptive.distill import DistillSettings
from tests.core import toy

FAST = DistillSettings(candidates=("binary-word",), folds=3)


def compile_toy(tmp_path, reflection, option, **kw):
    train, val = toy.make_examples(6), toy.make_examples(6, offset=100)
    lm = toy.actor_lm()
    with dspy.context(lm=lm):
        opt = AdaptiveGEPA(toy.metric, reflection_lm=reflection, max_metric_calls=60, reflection_minibatch_size=4,
                           seed=3, use_merge=False, progress=False, num_threads=2, log_dir=str(tmp_path / "run"),
                           distill_router=option, **kw)
        routed = opt.compile(dspy.Predict("question -> answer"), trainset=train, valset=val)
    return routed, lm


def test_compile_distills_the_best_programs_router_and_records_it(tmp_path):
    routed, lm = compile_toy(tmp_path, toy.reflection_lm(),
                             DistillSettings(candidates=("binary-word",), folds=3, requests=("add: 500 1", "upper: q")))
    d = routed.distilled_router
    assert d is not None and routed.library.active_ids() == (1,)
    assert d.training["requests"] == 12 + 12 + 2          # train + val + the extra unlabeled requests
    calls = sum(1 for c in lm.scripted.calls if "slot" in c.output_fields)
    with dspy.context(lm=lm):
        pred = routed(question="add: 20 22")
    assert pred.answer == "42" and route_of(pred).decided_by == "distilled"
    assert sum(1 for c in lm.scripted.calls if "slot" in c.output_fields) == calls
    record = load_run(tmp_path / "run").distilled_router
    assert record["built"] and record["chosen"] == "binary-word" and record["threshold"] == d.threshold
    assert record["heldout"]["agreement"] >= 0.98 and record["projected"]["router_calls_saved_per_1000"] > 0
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Distilled router" in report and "share still calling the LM router" in report
    saved = json.loads((tmp_path / "run" / "run.json").read_text())["distilled_router"]
    assert saved["labelling"]["router_calls"] == 26


def test_without_a_specialist_nothing_is_distilled_and_the_record_says_why(tmp_path):
    routed, _ = compile_toy(tmp_path, toy.reflection_lm(program_source=toy.WRONG_SOURCE), True)
    assert routed.library.active_ids() == () and routed.distilled_router is None
    record = load_run(tmp_path / "run").distilled_router
    assert record == {"built": False, "reason": record["reason"]} and "nothing to distill" in record["reason"]
    assert "Not built" in (tmp_path / "run" / "report.md").read_text()


def test_a_run_without_the_option_records_nothing(tmp_path):
    routed, _ = compile_toy(tmp_path, toy.reflection_lm(), False)
    assert routed.distilled_router is None and load_run(tmp_path / "run").distilled_router == {}
    assert "Distilled router" not in (tmp_path / "run" / "report.md").read_text()


def test_the_option_is_checked():
    with pytest.raises(InputError, match="distill_router must be"):
        AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(), max_metric_calls=10, distill_router="yes")


def test_a_failing_distillation_never_loses_the_search(tmp_path, monkeypatch):
    from dspy_adaptive import RoutedProgram

    def boom(self, *a, **k):
        raise RuntimeError("the router endpoint went away")

    monkeypatch.setattr(RoutedProgram, "distill_router", boom)
    routed, _ = compile_toy(tmp_path, toy.reflection_lm(), FAST)
    assert routed.library.active_ids() == (1,) and routed.distilled_router is None
    record = load_run(tmp_path / "run").distilled_router
    assert not record["built"] and "RuntimeError: the router endpoint went away" in record["reason"]
