"""Issue 16's bugs, each with its test: bool/numpy metric scores, max_merge_invocations=None, a student holding
dspy.Parallel, a RoutedProgram inside a larger module (save/load, save_program=True), unknown compile kwargs."""

from __future__ import annotations

import dspy
import numpy as np
import pytest

from dspy_adaptive import RoutedProgram, route_of
from dspy_adaptive.data import InputError
from tests.core import toy
from tests.dropin.common import actor_lm, data, optimizer, routed_program


@pytest.fixture(autouse=True)
def actor():
    with dspy.context(lm=toy.actor_lm()):
        yield


@pytest.mark.parametrize("kind", ["bool", "np.float32", "np.int64", "np.bool_"])
def test_bool_and_numpy_metrics_drive_the_search(kind):
    convert = {"bool": bool, "np.float32": np.float32, "np.int64": np.int64, "np.bool_": np.bool_}[kind]

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        return convert(str(pred.answer).strip() == gold.answer)   # dspy's own test metric shape

    train, val = data()
    res = optimizer(metric=metric).compile(dspy.Predict("question -> answer"), trainset=train,
                                           valset=val).detailed_results
    assert res.val_aggregate_scores[0] == pytest.approx(0.5)      # not zero: the caps family scores 1
    assert max(res.val_aggregate_scores) == pytest.approx(1.0)
    assert res.faults["metric_faults"] == 0


def test_max_merge_invocations_none_means_no_limit():
    train, val = data()
    opt = optimizer(use_merge=True, max_merge_invocations=None)
    routed = opt.compile(dspy.Predict("question -> answer"), trainset=train, valset=val)
    assert routed.detailed_results.budget["spent"] > 0
    from dspy_adaptive.merge.proposer import MergeState
    assert MergeState(invocations=10 ** 6, accepted_since=2).due(None, 2)
    # the cap counts accepted merges by default (issue 15), attempts when asked
    assert MergeState(invocations=5, accepted_since=2).due(5, 2)
    assert not MergeState(invocations=5, accepted=5, accepted_since=2).due(5, 2)
    assert not MergeState(invocations=5, accepted_since=2).due(5, 2, counts="attempts")


class WithParallel(dspy.Module):
    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict("question -> answer")
        self.parallel = dspy.Parallel(num_threads=2)

    def forward(self, question):
        (out,) = self.parallel([(self.answer, dict(question=question))])
        return dspy.Prediction(answer=out.answer)


def test_student_holding_dspy_parallel_compiles():
    import copy
    student = WithParallel()
    with pytest.raises(TypeError):   # what used to crash compile
        copy.deepcopy(student)
    train, val = data()
    routed = optimizer().compile(student, trainset=train, valset=val)
    assert routed(question="upper: abc").answer == "ABC"
    assert routed(question="add: 2 3").answer == "5"


class Outer(dspy.Module):
    def __init__(self, inner):
        super().__init__()
        self.pre = dspy.Predict("question -> answer")
        self.routed = inner

    def forward(self, question):
        return self.routed(question=question)


def test_routed_program_as_a_submodule_saves_and_loads_its_library(tmp_path):
    rp = routed_program()
    rp.named_predictors()   # discovers the specialist's predictors
    rp.router.demos = [dspy.Example(question="add: 1 1", specialists="...", slot="1")]
    outer = Outer(rp)
    path = tmp_path / "outer.json"
    outer.save(str(path))
    fresh = Outer(RoutedProgram(dspy.Predict("question -> answer"), fast_lm=rp.fast_lm, deep_lm=rp.deep_lm))
    fresh.load(str(path))
    assert fresh.routed.library == rp.library
    assert fresh.routed.router.demos[0]["slot"] == "1"
    pred = fresh(question="add: 2 2")
    assert route_of(pred).executed == 1 and pred.answer == "polished draft:add: 2 2"   # not the fallback


def test_routed_program_save_program_true_round_trips(tmp_path):
    rp = routed_program(bind_lms=False)   # (the scripted test LM itself holds a lock; a dspy.LM pickles)
    with dspy.context(lm=actor_lm()):
        rp(question="add: 1 2")   # a used program: its pool, caches and locks must not be pickled
    outer = Outer(rp)
    outer.save(str(tmp_path / "prog"), save_program=True)
    rp.save(str(tmp_path / "alone"), save_program=True)
    loaded = dspy.load(str(tmp_path / "prog"), allow_pickle=True)
    alone = dspy.load(str(tmp_path / "alone"), allow_pickle=True)
    try:
        for prog in (loaded, alone):
            with dspy.context(lm=actor_lm()):
                pred = prog(question="add: 2 2")
            assert route_of(pred).executed == 1 and pred.answer == "polished draft:add: 2 2"
    finally:
        loaded.routed.close()
        alone.close()
        rp.close()


def test_unknown_compile_kwargs_raise_a_clear_error():
    train, val = data()
    with pytest.raises(InputError, match="unexpected keyword argument.*'valsett'"):
        optimizer().compile(dspy.Predict("question -> answer"), trainset=train, valsett=val)
    with pytest.raises(TypeError):   # also a TypeError, as Python raises for an unknown keyword
        optimizer().compile(dspy.Predict("question -> answer"), trainset=train, num_threads=4)
    with pytest.raises(InputError, match="teacher"):
        optimizer().compile(dspy.Predict("question -> answer"), trainset=train, teacher=dspy.Predict("q -> a"))
