import math

import dspy
import pytest

from dspy_adaptive.scoring import normalise_metric_output
from dspy_adaptive.search.budget import Budget


@pytest.mark.parametrize("out, score, note", [
    (0.5, 0.5, None),
    (1, 1.0, None),
    (dspy.Prediction(score=0.25, feedback="close"), 0.25, None),
    ({"score": 0.75, "feedback": "ok"}, 0.75, None),
    (None, 0.0, "non-numeric"),
    ("0.9", 0.0, "non-numeric"),
    (True, 0.0, "non-numeric"),
    (math.nan, 0.0, "nan"),
    (dspy.Prediction(score=None, feedback="?"), 0.0, "non-numeric"),
])
def test_metric_outputs_are_normalised_or_recorded(out, score, note):
    got, feedback, bad = normalise_metric_output(out, failure_score=0.0)
    assert got == score and isinstance(feedback, str) and feedback
    assert (bad is None) if note is None else (note in bad)


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
