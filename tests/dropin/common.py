"""Shared pieces of the drop-in tests: the scripted two-family toy task (tests/core/toy.py) behind AdaptiveGEPA,
and a routed program with one two-predictor specialist."""

from __future__ import annotations

import dspy

from dspy_adaptive import AdaptiveGEPA, Library, RoutedProgram, Slot
from dspy_adaptive.testing import scripted_lm
from tests.core import toy

TWO_STEP = '''
class TwoStep(dspy.Module):
    def __init__(self):
        super().__init__()
        self.draft = dspy.ChainOfThought("question -> answer")
        self.polish = dspy.Predict("question, draft -> answer", instructions="Polish the draft answer.")

    def forward(self, question):
        d = self.draft(question=question)
        p = self.polish(question=question, draft=d.answer)
        return dspy.Prediction(answer=p.answer)
'''


def optimizer(reflection=None, metric=toy.metric, **kw) -> AdaptiveGEPA:
    params = dict(reflection_lm=reflection or toy.reflection_lm(), max_metric_calls=60, reflection_minibatch_size=4,
                  seed=3, use_merge=False, track_stats=True, progress=False)
    params.update(kw)
    return AdaptiveGEPA(metric, **params)


def data():
    return toy.make_examples(4), toy.make_examples(4, offset=100)


def respond(call):
    """Router -> slot 1 for "add:" requests; the specialist's steps; the fallback answers in upper case."""
    if "slot" in call.output_fields:
        return {"slot": "1" if (call.field("question") or "").startswith("add:") else "0"}
    if call.field("draft") is not None:
        return {"answer": "polished " + call.field("draft")}
    if "reasoning" in call.output_fields:
        return {"reasoning": "think", "answer": "draft:" + (call.field("question") or "")}
    return {"answer": (call.field("question") or "").upper()}


def actor_lm():
    return scripted_lm(respond, model="scripted/actor")


def routed_program(lm=None, bind_lms: bool = True) -> RoutedProgram:
    """A routed program with slot 1 = TWO_STEP; its profiles run on `lm` (bind_lms=False: on the configured LM)."""
    lm = lm or actor_lm()
    lib = Library.empty(2).with_slot(1, Slot().activated("Arithmetic: additions ('add:')", TWO_STEP, "fast"))
    if not bind_lms:
        return RoutedProgram(dspy.Predict("question -> answer"), lib)
    return RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=lm, deep_lm=lm)
