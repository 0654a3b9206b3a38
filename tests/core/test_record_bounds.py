"""What one row can write to evals.jsonl, the cache and run.json is bounded by the records layer itself.

The sandbox already caps a specialist (24 signature fields, output names of at most 64 plain characters,
100 predictor calls); the records layer holds its own caps anyway (defence in depth), and they also bound
rows of the user's in-process fallback, which no sandbox limits.
"""

from __future__ import annotations

import json

import dspy

from dspy_adaptive import Library, RoutedProgram, Slot
from dspy_adaptive.program.scoring import score_example
from dspy_adaptive.schema import (
    MAX_KEY_CHARS,
    MAX_ROW_BYTES,
    MAX_STEP_FIELDS,
    MAX_STEPS,
    ProposalRecord,
    RowResult,
    bounded_key,
    clip,
)
from dspy_adaptive.testing import scripted_lm

NAMES = [f"f{i:02d}_" + "k" * 58 for i in range(23)]          # 23 inputs of 62 characters: the sandbox allows them
MANY_STEPS = f'''
class Chatty(dspy.Module):
    def __init__(self):
        super().__init__()
        self.step = dspy.Predict("{", ".join(NAMES)} -> answer")

    def forward(self, question):
        values = {{name: question * 400 for name in {NAMES!r}}}
        out = None
        for i in range(90):
            out = self.step(**values)
        return dspy.Prediction(answer=out.answer)
'''


def _written(result: RowResult) -> int:
    """Bytes of the row as evals.jsonl writes it."""
    return len(json.dumps({"iter": 1, "hash": "h", "result": result.to_dict()}))


def answer_everything(call):
    if "slot" in call.output_fields:
        return {"slot": "1"}
    return {"answer": "A" * 3000}


def test_a_specialist_with_many_wide_steps_writes_a_bounded_row():
    lm = scripted_lm(answer_everything)
    lib = Library.empty(1).with_slot(1, Slot().activated("everything", MANY_STEPS, "fast"))
    rp = RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=lm, deep_lm=lm)
    try:
        res = score_example(rp, dspy.Example(question="why? ", answer="x").with_inputs("question"),
                            lambda *a: 1.0, predictor_label=rp.predictor_label)
    finally:
        rp.close()
    assert res.error is None and res.executed == 1
    assert len(res.steps) + res.steps_omitted == 91                # the router and 90 specialist calls
    assert len(res.steps) <= MAX_STEPS and res.steps_omitted >= 91 - MAX_STEPS
    assert res.steps[0]["predictor"] == "router" and res.steps[1]["predictor"] == "slot1.step"
    assert _written(res) <= MAX_ROW_BYTES + 100
    back = RowResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert back == res                                               # bounding a bounded row changes nothing


class Flood(dspy.Module):
    """A user's in-process program (no sandbox): 80 steps with 40 long field names each."""

    def __init__(self):
        super().__init__()
        names = [f"field_{i}_" + "x" * 300 for i in range(40)]
        sig = dspy.Signature({n: (str, dspy.InputField()) for n in names} | {"answer": (str, dspy.OutputField())})
        self.p = dspy.Predict(sig)
        self.names = names

    def forward(self, question):
        out = None
        for _ in range(80):
            out = self.p(**dict.fromkeys(self.names, question))
        return dspy.Prediction(**{"answer": out.answer, "weird\u202ekey" + "y" * 500: "v" * 100_000})


def test_the_records_layer_bounds_rows_no_sandbox_limited():
    lm = scripted_lm(lambda call: {"answer": "B" * 50_000})
    with dspy.context(lm=lm):
        res = score_example(Flood(), dspy.Example(question="q", answer="x").with_inputs("question"),
                            lambda *a: dspy.Prediction(score=0.0, feedback="F" * 100_000),
                            predictor_label=lambda p: "fallback." + "p" * 1000)
    assert len(res.steps) <= MAX_STEPS and len(res.steps) + res.steps_omitted == 80
    for step in res.steps:
        assert len(step["predictor"]) <= 120
        assert len(step["inputs"]) <= MAX_STEP_FIELDS + 1 and "..." in step["inputs"]
        assert all(len(k) <= MAX_KEY_CHARS for k in step["inputs"])
    assert all(len(k) <= MAX_KEY_CHARS and k.isprintable() and "\u202e" not in k for k in res.output)
    assert len(res.feedback) <= 16000 and "characters left out" in res.feedback   # its beginning and its end
    assert res.feedback.startswith("FFF") and res.feedback.endswith("FFF")
    assert _written(res) <= MAX_ROW_BYTES + 100


def test_row_bounds_hold_for_rows_built_directly():
    huge = {("k" * 10_000) + str(i): "\U0001f600" * 10_000 for i in range(500)}
    steps = tuple({"predictor": "p" * 10_000, "inputs": huge, "outputs": huge} for _ in range(1000))
    r = RowResult("row", 0.0, "f" * 10**6, huge, 1, 1, "r" * 10**6, "e" * 10**6, steps, "m" * 10**6, "K" * 10**4)
    assert _written(r) <= MAX_ROW_BYTES + 100
    assert r.output["..."].endswith("not recorded") or "..." in r.output
    assert RowResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_proposal_records_bound_their_text():
    p = ProposalRecord(iteration=1, kind="reflect", parents=(0,), action="activate", slot=1, minibatch=("a",),
                       parent_sum=0.0, child_sum=None, accepted=False, reason="R" * 10**6, child_index=None,
                       child_hash=None, budget_at=3,
                       details={"rejected_source": "S" * 10**6, "k" * 1000: [1, 2, {"nested": "N" * 10**5}]},
                       failure="sandbox_rejected")
    assert len(p.reason) <= 2000 and len(p.details["rejected_source"]) <= 6000
    (key,) = [k for k in p.details if k != "rejected_source"]
    assert len(key) <= MAX_KEY_CHARS and p.details[key][:2] == [1, 2] and len(p.details[key][2]["nested"]) <= 6000
    assert ProposalRecord.from_dict(json.loads(json.dumps(p.to_dict()))) == p


def test_clip_and_bounded_key_are_exact_and_idempotent():
    for n in (0, 5, 64, 65, 1000, 10**6):
        text = "x" * n
        c, k = clip(text, 100), bounded_key(text, 64)
        assert len(c) <= 100 and clip(c, 100) == c
        assert len(k) <= 64 and bounded_key(k, 64) == k
    assert bounded_key("a b\u202e\nc") == "a?b??c"
