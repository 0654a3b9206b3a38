"""PlainTextAdapter (issue 28): a small local model is asked for a free-text answer in plain words, while typed,
numeric and multi-field answers stay JSON (grammar-decoded by the local engine)."""

from __future__ import annotations

import dspy

from dspy_adaptive.lm.plain_adapter import PlainTextAdapter, plain_field
from dspy_adaptive.testing import scripted_lm


def test_a_free_text_answer_is_asked_and_read_in_plain_words():
    lm = scripted_lm(lambda call: "response: Marrowgate")
    with dspy.context(lm=lm, adapter=PlainTextAdapter()):
        out = dspy.ChainOfThought(dspy.Signature("request, passages -> response", "Answer from the passages."))(
            request="Where was Tobias Grell born?", passages=["Tobias Grell | born in Marrowgate"])
    assert out.response == "Marrowgate" and out.reasoning == ""
    call = lm.scripted.calls[0]
    assert call.system == "Answer from the passages." and not call.json_mode
    assert call.user == "Passages:\nTobias Grell | born in Marrowgate\n\nRequest:\nWhere was Tobias Grell born?"
    assert "{response}" not in call.prompt and "[[ ##" not in call.prompt


def test_numbers_types_and_several_fields_stay_json():
    assert plain_field(dspy.Signature("request -> slot")) is None                 # the router's number
    assert plain_field(dspy.Signature("request -> action, slot")) is None
    assert plain_field(dspy.Signature("request -> count: int")) is None
    assert plain_field(dspy.Signature("request -> response")) == "response"
    lm = scripted_lm(lambda call: {"slot": "2"})
    with dspy.context(lm=lm, adapter=PlainTextAdapter()):
        assert dspy.Predict("request, specialists -> slot")(request="x", specialists="1: a\n2: b").slot == "2"
    assert lm.scripted.calls[0].json_mode
