"""DSPy's own types (Image, Audio, History, Code, ToolCalls, ...) in specialist signatures: a fixed list of names,
never evaluated; their values cross the bridge as plain data; an image-input specialist runs end to end and
the reflection LM sees the requests' images as images."""

from __future__ import annotations

import dspy
import pytest

from dspy_adaptive import Library, RoutedProgram, Slot, route_of
from dspy_adaptive.sandbox.bridge import BridgeRefused, parse_predict, to_plain, typed_inputs
from dspy_adaptive.sandbox.signature import SignatureError, parse_signature
from dspy_adaptive.testing import scripted_lm
from tests.dropin.common import optimizer
from tests.dropin.test_images import PartsEngine

URL = "https://example.com/clock.png"
CLOCK = '''
class Clock(dspy.Module):
    def __init__(self):
        super().__init__()
        self.read = dspy.Predict("clock_photo: dspy.Image -> hour: int", instructions="Read the hour hand.")

    def forward(self, clock_photo):
        return dspy.Prediction(hour=self.read(clock_photo=clock_photo).hour)
'''


@pytest.mark.parametrize("text, canonical", [
    ("clock_photo: dspy.Image -> hour: int", "clock_photo: dspy.Image -> hour: int"),
    ("a: Image, h: dspy.History -> c: dspy.Code['python']", "a: dspy.Image, h: dspy.History -> c: dspy.Code['python']"),
    ("a: list[dspy.Audio], f: Optional[dspy.File] -> t: dspy.ToolCalls, r: dspy.Reasoning",
     "a: list[dspy.Audio], f: Optional[dspy.File] -> t: dspy.ToolCalls, r: dspy.Reasoning"),
])
def test_dspy_types_are_names_of_the_grammar(text, canonical):
    assert parse_signature(text).text == canonical
    assert parse_signature(canonical).text == canonical


@pytest.mark.parametrize("text", ["x: dspy.Tool -> y", "x: dspy.Predict -> y", "x: dspy.Image.url -> y",
                                  "x: dspy.__class__ -> y", "x: os.environ -> y", "x: row.example -> y",
                                  "x: dspy.Code[__import__] -> y", "x: dspy.Code['a\" b'] -> y", "x.y -> z"])
def test_anything_else_dotted_is_refused_and_nothing_is_evaluated(text):
    with pytest.raises(SignatureError):
        parse_signature(text)


def request(inputs):
    return parse_predict({"name": "read", "kind": "Predict", "signature": "clock_photo: dspy.Image -> hour: int",
                          "instructions": None, "inputs": inputs})


def test_values_cross_the_bridge_as_plain_data_and_come_back_as_dspy_types():
    image = dspy.Image(URL)
    sent = to_plain({"clock_photo": image, "history": dspy.History(messages=[{"q": "a"}]),
                     "code": dspy.Code(code="print(1)")})
    assert sent == {"clock_photo": {"url": URL}, "history": {"messages": [{"q": "a"}]}, "code": {"code": "print(1)"}}
    back = typed_inputs(request(sent and {"clock_photo": sent["clock_photo"]}))
    assert isinstance(back["clock_photo"], dspy.Image) and back["clock_photo"].url == URL
    for bad in ({"url": "/etc/passwd"}, "just text", {"url": URL, "download": True}):
        with pytest.raises(BridgeRefused, match="not a valid dspy.Image"):
            typed_inputs(request({"clock_photo": bad}))
    files = parse_predict({"name": "f", "kind": "Predict", "signature": "doc: dspy.File -> s", "instructions": None,
                           "inputs": {"doc": {"file_id": "file-someone-elses"}}})
    with pytest.raises(BridgeRefused, match="inline"):
        typed_inputs(files)


def clock_respond(call):
    if "slot" in call.output_fields:
        return {"slot": "1"}
    if "hour" in call.output_fields:
        return {"hour": "8"}
    return {"hour": "3"}


def test_an_image_input_specialist_runs_end_to_end_and_sends_the_image_as_an_image():
    engine = PartsEngine(clock_respond, model="scripted/actor")
    lm = dspy.LM("scripted/actor", engine=engine, cache=False, num_retries=0)
    lib = Library.empty(2).with_slot(1, Slot().activated("Clock photos: read the hour", CLOCK, "fast"))
    rp = RoutedProgram(dspy.Predict("clock_photo: dspy.Image -> hour: int"), lib, fast_lm=lm, deep_lm=lm)
    pred = rp(clock_photo=dspy.Image(URL))
    assert route_of(pred).executed == 1 and pred.hour == 8
    assert engine.parts[-1].count("image") == 1                 # the specialist's predictor call: an image part
    assert URL not in engine.texts[-1] and "CUSTOM-TYPE" not in engine.texts[-1]
    assert [n for n, _ in rp.named_predictors()] == ["router", "slot1.read", "fallback"]
    rp.close()


def test_a_dspy_typed_output_of_the_student_comes_back_typed_from_a_specialist():
    source = CLOCK.replace('"clock_photo: dspy.Image -> hour: int"', '"clock_photo: dspy.Image -> code: dspy.Code"') \
        .replace("hour=self.read(clock_photo=clock_photo).hour", "code=self.read(clock_photo=clock_photo).code")
    lm = scripted_lm(lambda call: {"slot": "1"} if "slot" in call.output_fields else {"code": "print(8)"})
    lib = Library.empty(1).with_slot(1, Slot().activated("Clock photos", source, "fast"))
    rp = RoutedProgram(dspy.Predict("clock_photo: dspy.Image -> code: dspy.Code"), lib, fast_lm=lm, deep_lm=lm)
    pred = rp(clock_photo=dspy.Image(URL))
    assert route_of(pred).executed == 1 and isinstance(pred.code, dspy.Code) and pred.code.code == "print(8)"
    rp.close()


def test_a_search_activates_an_image_specialist_and_reflection_sees_the_images_as_images():
    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        return dspy.Prediction(score=float(pred.hour == gold.hour), feedback="wrong hour")

    specialist_calls = []

    def actor(call):          # the fallback answers 3, the specialist's predictor 8; the router picks slot 1
        if "slot" in call.output_fields:
            return {"slot": "1" if "1: Clock" in (call.field("specialists") or "") else "0"}
        if "Read the hour hand." in call.system:
            specialist_calls.append(actor_engine.parts[-1])          # the content parts this call sent
            return {"hour": "8"}
        return {"hour": "3"}

    def reflect(call):
        if "action" in call.output_fields:
            return {"action": "activate", "slot": "1"}
        return {"description": "Clock photos: read the hour", "program": CLOCK, "profile": "fast"}

    actor_engine = PartsEngine(actor, model="scripted/actor")
    reflection = PartsEngine(reflect, model="scripted/reflection")
    examples = [dspy.Example(id=f"c{i}", clock_photo=dspy.Image(f"{URL}?{i}"), hour=8).with_inputs("clock_photo")
                for i in range(3)]
    with dspy.context(lm=dspy.LM("scripted/actor", engine=actor_engine, cache=False, num_retries=0)):
        res = optimizer(dspy.LM("scripted/reflection", engine=reflection, cache=False, num_retries=0),
                        metric=metric, max_metric_calls=12, reflection_minibatch_size=2).compile(
            dspy.Predict("clock_photo: dspy.Image -> hour: int"), trainset=examples, valset=examples)
    assert res.detailed_results.val_aggregate_scores == [0.0, 1.0]     # the image specialist is archived
    assert res.library.active_ids() == (1,)
    assert reflection.parts[0].count("image") == 2                      # the minibatch's two images, as images
    assert any('ChainOfThought("clock_photo: dspy.Image -> hour"' in t for t in reflection.texts)  # the contract
    assert specialist_calls and all(p.count("image") == 1 for p in specialist_calls)
    res.close()
