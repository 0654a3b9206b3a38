"""The host bridge: nothing a specialist sends is evaluated on the host.

Three levels: the strict signature grammar and request parsing as pure functions; the bridge ALONE --
a worker with full Python, no static policy, no OS layer, writing raw protocol frames at the host --
and the bridge end to end through a RoutedProgram with a real (scripted) dspy.LM, where a refused
request must never reach the LM.
"""

from __future__ import annotations

import json
import os
import time
import warnings

import dspy
import pytest
from sandbox_helpers import SECRET, FakeBridge, unchecked

from dspy_adaptive import Library, RoutedProgram, Slot
from dspy_adaptive.sandbox import BridgeLimits, BridgeRefused, Layers, PredictorCache, SandboxPool, SpecialistError
from dspy_adaptive.sandbox.bridge import (
    PredictRequest,
    check_plain,
    host_signature,
    parse_predict,
    parse_tool,
    sandbox_error_text,
)
from dspy_adaptive.sandbox.signature import SignatureError, parse_signature
from dspy_adaptive.testing import scripted_lm


# ----------------------------------------------------------------------------------------- the grammar
@pytest.mark.parametrize("text, canonical", [
    ("q -> a", "q: str -> a: str"),
    ("question, context: list[str] -> answer: int", "question: str, context: list[str] -> answer: int"),
    ("x: Optional[int] -> y: Literal['a', \"b\", 3]", "x: Optional[int] -> y: Literal['a', 'b', 3]"),
    ("m: dict[str, list[float]] -> ok: bool | None", "m: dict[str, list[float]] -> ok: bool | None"),
    ("x: List[str] -> y: Dict[str, Any]", "x: list[str] -> y: dict[str, Any]"),
    (" -> a", " -> a: str"),
])
def test_grammar_accepts_plain_signatures(text, canonical):
    assert parse_signature(text).text == canonical


@pytest.mark.parametrize("text", [
    "q: os.environ -> a", "q: row.example -> a", "q: example -> a", "q: __import__('os') -> a",
    "q: self.deep_lm.kwargs -> a", "q: typing.Any -> a", "q: list[os.environ] -> a", "q: str = 1 -> a",
    "q -> a -> b", "q", "q -> ", "q -> a, a", "_q -> a", "q -> json", "q -> class",
    "q: list[list[list[list[list[int]]]]] -> a", "ｑ -> a", "q: Literal[open] -> a", "q: 'x' -> a",
    "q -> " + ", ".join(f"f{i}" for i in range(30)), "q -> a" + " " * 5000,
])
def test_grammar_refuses_everything_else(text):
    with pytest.raises(SignatureError):
        parse_signature(text)


def test_grammar_never_looks_at_the_callers_frames():
    example = "the gold label"  # noqa: F841 - DSPy's own parser would find this local by walking the stack
    with pytest.raises(SignatureError, match="'example' is not allowed"):
        parse_signature("q: example -> a")
    with pytest.raises(ValueError):     # DSPy's parser resolves it (the reason for our grammar)
        dspy.Signature("q: example_that_does_not_exist_anywhere -> a")


def test_host_signature_is_built_from_parsed_fields():
    sig = host_signature(parse_signature("q: int, c: list[str] -> a: Literal['x', 'y']"), "Do it.")
    assert list(sig.input_fields) == ["q", "c"] and list(sig.output_fields) == ["a"]
    assert sig.input_fields["q"].annotation is int and sig.instructions == "Do it."


# ----------------------------------------------------------------------------------------- request parsing
def req(**kw):
    msg = {"op": "predict", "name": "p", "kind": "Predict", "signature": "q -> a", "instructions": None,
           "inputs": {"q": "hi"}}
    msg.update(kw)
    return msg


@pytest.mark.parametrize("msg, needle", [
    (req(inputs={"q": "hi", "config": {"api_base": "http://evil", "n": 25}}), "takes only its input fields"),
    (req(inputs={"q": "hi", "demos": []}), "takes only its input fields"),
    (req(inputs={"q": "hi", "lm": "openai/x"}), "takes only its input fields"),
    (req(inputs={"q": "hi", "signature": "a -> b"}), "takes only its input fields"),
    (req(inputs={"q": "hi", "_trace": False}), "takes only its input fields"),
    (req(kind="ReAct"), "kind must be one of"),
    (req(name="x" * 101), "at most 100 plain characters"),
    (req(name="a b"), "at most 100 plain characters"),
    (req(signature="q: os.environ -> a"), "type 'os' is not allowed"),
    (req(instructions="x" * 12_001), "at most 12000"),
    (req(instructions=["not", "text"]), "instructions must be text"),
    (req(inputs="q=hi"), "keyword arguments"),
    (req(inputs={"q": float("inf")}), "non-finite"),
    (req(inputs={"q": "x" * 300_000}), "bytes as JSON"),
    (req(kind="ChainOfThought", signature="q -> reasoning"), "adds its own 'reasoning'"),
])
def test_predict_requests_outside_the_contract_are_refused(msg, needle):
    with pytest.raises(BridgeRefused, match=needle):
        parse_predict(msg)


def test_deep_nesting_is_refused_without_recursion():
    deep: object = "x"
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(BridgeRefused, match="levels deep"):
        check_plain({"q": deep}, what="inputs", max_depth=16)


def test_a_valid_request():
    r = parse_predict(req(signature="q: int -> a", instructions="Be brief.", inputs={"q": 3}))
    assert isinstance(r, PredictRequest) and r.inputs == {"q": 3}
    assert r.key == ("p", "Predict", "q: int -> a: str", "Be brief.")


def test_tool_requests():
    ok = parse_tool({"name": "search", "kwargs": {"query": "x", "k": 3}}, ("search",))
    assert ok.kwargs == {"query": "x", "k": 3}
    with pytest.raises(BridgeRefused, match="no tool named"):
        parse_tool({"name": "open", "kwargs": {}}, ("search",))
    with pytest.raises(BridgeRefused, match="keyword arguments"):
        parse_tool({"name": "search", "kwargs": ["x"]}, ("search",))


def test_errors_sent_into_the_sandbox_carry_no_host_text():
    boom = RuntimeError(f"Authorization: Bearer {SECRET} at http://10.0.0.1:8000 env={dict(os.environ)}")
    text = sandbox_error_text(boom, "predictor 'p'")
    assert text == "predictor 'p' failed (RuntimeError)" and SECRET not in text


def test_predictor_cache_is_bounded():
    cache = PredictorCache(max_entries=4)
    for i in range(20):
        cache.get(1, parse_predict(req(instructions=f"variant {i}")), "slot1.p")
    assert len(cache) == 4


# ----------------------------------------------------------------------------------------- the bridge alone
RAW = '''
import json, struct
f = sys._getframe()
while f is not None and "out_fd" not in f.f_locals:
    f = f.f_back
rfd, wfd = f.f_locals["in_fd"], f.f_locals["out_fd"]
def call(msg):
    data = json.dumps(msg).encode()
    os.write(wfd, struct.pack(">I", len(data)) + data)
    head = b""
    while len(head) < 4:
        head += os.read(rfd, 4 - len(head))
    n = struct.unpack(">I", head)[0]
    body = b""
    while len(body) < n:
        body += os.read(rfd, n - len(body))
    return json.loads(body)
replies = [call(m) for m in MESSAGES]
return dspy.Prediction(replies=replies)
'''

ATTACK_FRAMES = [
    {"op": "predict", "name": "p", "kind": "Predict", "signature": "q: os.environ -> a", "inputs": {"q": "x"}},
    {"op": "predict", "name": "p", "kind": "Predict", "signature": "q: row.example -> a", "inputs": {"q": "x"}},
    {"op": "predict", "name": "p", "kind": "Predict", "signature": "q -> a",
     "inputs": {"q": "x", "config": {"api_base": "http://127.0.0.1:9", "n": 25}}},
    {"op": "predict", "name": "p", "kind": "Predict", "signature": "q -> " + ", ".join(f"f{i}" for i in range(8000)),
     "inputs": {"q": "x"}},
    {"op": "predict", "name": "p" * 100_000, "kind": "Predict", "signature": "q -> a", "inputs": {"q": "x"}},
    {"op": "predict", "name": "p", "kind": "Eval", "signature": "q -> a", "inputs": {"q": "x"}},
    {"op": "predict", "name": "p", "kind": "Predict", "signature": {"q": "os.environ"}, "inputs": {"q": "x"}},
    {"op": "predict", "name": "p", "kind": "Predict", "signature": "q -> a", "instructions": "x" * 900_000,
     "inputs": {"q": "x"}},
    {"op": "predict", "name": "p", "kind": "Predict", "signature": "q -> a",
     "inputs": {**{f"k{i}": "v" for i in range(20_000)}, "q": "x"}},
    {"op": "tool", "name": "open", "kwargs": {"file": "/etc/passwd"}},
    {"op": "tool", "name": "search", "kwargs": {"query": "x", "__class__": 1}},
]


def test_the_bridge_alone_refuses_raw_frames_and_spends_nothing():
    """No policy, no RestrictedPython, no OS layer: the worker writes frames of its choosing, and the
    only thing between it and the host is the bridge."""
    bridge = FakeBridge()
    src = unchecked(RAW.replace("MESSAGES", repr(ATTACK_FRAMES)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with SandboxPool(max_workers=1, timeout=10, tool_names=("search",), layers=Layers.none()) as p:
            cpu0 = time.process_time()
            res = p._run_unchecked(src, {}, bridge)
            host_cpu = time.process_time() - cpu0
    replies = res.outputs["replies"]
    assert len(replies) == len(ATTACK_FRAMES)
    assert all(r["ok"] is False for r in replies), replies
    assert bridge.calls == [] and bridge.tool_calls == []               # nothing reached the bridge
    assert len(res.refused) == len(ATTACK_FRAMES)
    blob = json.dumps(replies)
    assert SECRET not in blob and "OPENAI_API_KEY" not in blob and len(blob) < 20_000
    assert host_cpu < 2.0, host_cpu                                     # the 8,000 fields cost nothing


def test_the_bridge_alone_caps_distinct_predictors_per_call():
    frames = [{"op": "predict", "name": "p", "kind": "Predict", "signature": "q -> a", "instructions": f"v{i}",
               "inputs": {"q": "x"}} for i in range(BridgeLimits().max_predictors + 3)]
    bridge = FakeBridge()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with SandboxPool(max_workers=1, timeout=10, layers=Layers.none()) as p:
            with pytest.raises(SpecialistError) as ei:
                p._run_unchecked(unchecked(RAW.replace("MESSAGES", repr(frames))), {}, bridge)
    assert ei.value.kind == "predictor_limit" and "distinct predictors" in ei.value.reason
    assert len(bridge.calls) == BridgeLimits().max_predictors


# ----------------------------------------------------------------------------------------- end to end
def routed_with(source: str, lm) -> RoutedProgram:
    lib = Library.empty(2).with_slot(1, Slot().activated("everything", source, "fast"))
    return RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=lm, deep_lm=lm)


def scripted():
    return scripted_lm(lambda call: {"slot": "1"} if "slot" in call.output_fields else {"answer": "42"})


@pytest.mark.parametrize("call", [
    'dspy.Predict("question: os.environ -> answer")(question=question)',
    'dspy.Predict("question -> answer")(question=question, config={"api_base": "http://127.0.0.1:9", "n": 25})',
    'dspy.Predict("question -> answer")(question=question, lm="openai/gpt-4o", demos=[])',
])
def test_refused_requests_never_reach_the_lm(call):
    lm = scripted()
    source = ("class Solver(dspy.Module):\n    def forward(self, question):\n"
              f"        out = {call}\n        return dspy.Prediction(answer=str(out.answer))\n")
    os.environ["OPENAI_API_KEY"] = SECRET
    routed = routed_with(source, lm)
    try:
        with dspy.context(lm=lm):
            with pytest.raises(Exception) as ei:
                routed(question="what is 6*7?")
    finally:
        routed.sandbox.close()
    assert "HostError" in str(ei.value) and SECRET not in str(ei.value)
    n_router = sum(1 for p in lm.scripted.prompts() if "specialists" in p)
    assert len(lm.scripted.prompts()) == n_router == 1                   # only the router called the LM


def test_an_honest_specialist_still_works_end_to_end():
    lm = scripted()
    source = ('class QA(dspy.Signature):\n    """Answer."""\n    question: str = dspy.InputField()\n'
              '    answer: int = dspy.OutputField()\n\n'
              "class Solver(dspy.Module):\n    def __init__(self):\n        super().__init__()\n"
              "        self.qa = dspy.ChainOfThought(QA)\n\n"
              "    def forward(self, question):\n"
              "        return dspy.Prediction(answer=self.qa(question=question).answer)\n")
    routed = routed_with(source, lm)
    try:
        with dspy.context(lm=lm):
            assert routed(question="6*7?").answer == 42
    finally:
        routed.sandbox.close()
