"""`--feedback scalar`: the feedback ablation of reference 001 (§4.5-4.6).

Decomposed, per-dimension feedback (which constraint failed, which article holds the evidence, what the
judge said) was the causal ingredient of transfer there; collapsing it to a scalar made transfer negative.
`ScalarFeedback(metric)` keeps the score and replaces the feedback with the score alone, so that finding can
be re-tested on this mixture. Run-time errors of the program itself are not metric feedback and still reach
reflection (as in the paper's setting: a crash is not a per-dimension judgement).
"""

from __future__ import annotations

from typing import Any

import dspy

from dspy_adaptive.program.scoring import normalise_metric_output


class ScalarFeedback:
    """A metric whose feedback is only its score."""

    def __init__(self, metric: Any):
        self.metric = metric

    def __call__(self, gold, pred, trace=None, pred_name=None, pred_trace=None) -> dspy.Prediction:
        score, _, bad = normalise_metric_output(self.metric(gold, pred, trace, pred_name, pred_trace), 0.0)
        if bad is not None:
            raise ValueError(bad)
        return dspy.Prediction(score=score, feedback=f"Score: {score:.3f}")
