"""Images in requests reach the reflection LM as images (structured content), as dspy.GEPA 3.4.1 sends them."""

from __future__ import annotations

import dspy

from dspy_adaptive.testing import ScriptedEngine, scripted_lm
from tests.core import toy
from tests.dropin.common import optimizer

URL = "https://example.com/clock.png"


class PartsEngine(ScriptedEngine):
    """A scripted engine that also records the content-part types of every request."""

    def __init__(self, respond, **kw):
        super().__init__(respond, **kw)
        self.parts: list[list[str]] = []
        self.texts: list[str] = []

    def complete(self, request):
        parts = [p for m in request.messages for p in (m.parts or ())]
        self.parts.append([getattr(p, "type", "?") for p in parts])
        self.texts.append("".join(getattr(p, "text", None) or "" for p in parts))
        return super().complete(request)


def test_request_images_reach_the_reflection_lm_as_images():
    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        return dspy.Prediction(score=float(pred.answer == gold.answer), feedback="wrong hour")

    def actor(call):
        if "slot" in call.output_fields:
            return {"slot": "0"}
        return {"answer": "3"}

    examples = [dspy.Example(id=f"r{i}", question=dspy.Image(f"{URL}?{i}"), answer="8").with_inputs("question")
                for i in range(3)]
    engine = PartsEngine(toy.reflection_lm().scripted.respond, model="scripted/reflection")
    reflection = dspy.LM("scripted/reflection", engine=engine, cache=False, num_retries=0)
    with dspy.context(lm=scripted_lm(actor)):
        optimizer(reflection, max_metric_calls=8, reflection_minibatch_size=2).compile(
            dspy.Predict("question: dspy.Image -> answer"), trainset=examples, valset=examples)
    assert engine.parts, "reflection was called"
    first = engine.parts[0]
    assert first.count("image") == 2                           # the two minibatch requests' images, as images
    text = engine.texts[0]
    assert "[image 1]" in text and "[image 2]" in text and URL not in text   # placeholders in the traces
