import math

import dspy
import numpy as np
import pytest

from dspy_adaptive.program.scoring import normalise_metric_output, objective_scores_of, score_example
from dspy_adaptive.search.budget import Budget


@pytest.mark.parametrize("out, score, note", [
    (0.5, 0.5, None),
    (1, 1.0, None),
    (dspy.Prediction(score=0.25, feedback="close"), 0.25, None),
    ({"score": 0.75, "feedback": "ok"}, 0.75, None),
    (None, 0.0, "non-numeric"),
    ("0.9", 0.0, "non-numeric"),
    (True, 1.0, None),          # dspy.GEPA's own test metric: score = gold.output == pred.output
    (False, 0.0, None),
    (np.float32(0.5), 0.5, None),
    (np.float64(0.25), 0.25, None),
    (np.int64(1), 1.0, None),
    (np.bool_(True), 1.0, None),
    (np.bool_(False), 0.0, None),
    (np.array(0.75), 0.75, None),
    (dspy.Prediction(score=True, feedback="right"), 1.0, None),
    (dspy.Prediction(score=np.float32(0.5), feedback="half"), 0.5, None),
    ({"score": np.int64(0), "feedback": "no"}, 0.0, None),
    (np.array([0.5, 0.5]), 0.0, "non-numeric"),
    (np.float64("nan"), 0.0, "nan"),
    (math.nan, 0.0, "nan"),
    (dspy.Prediction(score=None, feedback="?"), 0.0, "non-numeric"),
])
def test_metric_outputs_are_normalised_or_recorded(out, score, note):
    got, feedback, bad = normalise_metric_output(out, failure_score=0.0)
    assert got == score and isinstance(feedback, str) and feedback
    assert (bad is None) if note is None else (note in bad)


def test_bool_and_numpy_metrics_score_a_real_rollout():
    # issue 16: a bool metric used to be recorded as a metric fault and scored 0, silently
    program = dspy.Predict("question -> answer")
    lm = dspy.utils.DummyLM([{"answer": "4"}] * 4)
    ex = dspy.Example(question="2+2?", answer="4").with_inputs("question")
    for metric in (lambda g, p, *a: g.answer == p.answer, lambda g, p, *a: np.float32(g.answer == p.answer),
                   lambda g, p, *a: np.bool_(g.answer == p.answer),
                   lambda g, p, *a: dspy.Prediction(score=np.int64(1), feedback="ok")):
        with dspy.context(lm=lm):
            res = score_example(program, ex, metric)
        assert res.score == 1.0 and res.metric_note is None


def test_objective_scores_are_kept():
    out = dspy.Prediction(score=0.5, feedback="f", objective_scores={"acc": np.float32(1.0), "cost": 0.25,
                                                                       "bad": "x"})
    assert objective_scores_of(out) == {"acc": 1.0, "cost": 0.25}
    assert objective_scores_of(0.5) is None and objective_scores_of(dspy.Prediction(score=1.0)) is None


def test_negative_and_large_scores_are_kept():
    # PUPA-style negative utilities are real measurements, not faults
    assert normalise_metric_output(-0.5, 0.0)[0] == -0.5
    assert normalise_metric_output(3.0, 0.0)[0] == 3.0


def test_budget_counts_by_kind():
    b = Budget(10)
    b.charge("seed_validation", 6)
    assert b.can_start()
    b.charge("parent_minibatch", 3)
    b.charge("child_minibatch", 3)
    assert not b.can_start()
    r = b.report()
    assert r.spent == 12 and r.overshoot == 2 and sum(r.by_kind.values()) == 12
    with pytest.raises(ValueError):
        b.charge("bogus")
