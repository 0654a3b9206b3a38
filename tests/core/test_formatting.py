"""The system-message memo: byte-identical messages, built once per signature, stock adapters only."""

from __future__ import annotations

import dspy
import pytest

from dspy_adaptive import Library, RoutedProgram, Slot
from dspy_adaptive.lm.adapter_memo import memoized
from dspy_adaptive.testing import scripted_lm

SIGS = [
    dspy.Signature("question -> answer", "Answer the question."),
    dspy.Signature("question: str, context: list[str] -> answer: int, confidence: float", "Count."),
    dspy.ChainOfThought("question -> answer").predict.signature,
]


@pytest.mark.parametrize("adapter", [dspy.ChatAdapter(), dspy.JSONAdapter(), dspy.XMLAdapter()],
                         ids=["chat", "json", "xml"])
@pytest.mark.parametrize("sig", SIGS, ids=["plain", "typed", "cot"])
def test_memoised_messages_are_identical_to_the_adapters_own(adapter, sig):
    inputs = {k: (["a", "b"] if "context" in k else "what is 2+2?") for k in sig.input_fields}
    memo = memoized(adapter)
    assert memo is not adapter and type(memo) is type(adapter)
    for _ in range(2):   # miss, then hit
        assert memo.format(sig, [], inputs) == adapter.format(sig, [], inputs)


def test_the_system_message_is_built_once_per_signature(monkeypatch):
    built = []
    original = dspy.ChatAdapter.format_field_structure

    def counting(self, signature):
        built.append(signature)
        return original(self, signature)

    monkeypatch.setattr(dspy.ChatAdapter, "format_field_structure", counting)
    memo = memoized(dspy.ChatAdapter())
    for _ in range(5):
        for sig in SIGS[:2]:
            memo.format(sig, [], dict.fromkeys(sig.input_fields, "x"))
    assert built == SIGS[:2]


def test_one_memo_per_configured_adapter_and_custom_adapters_untouched():
    chat = dspy.ChatAdapter()
    assert memoized(chat) is memoized(chat)
    assert memoized(None) is memoized(None) and type(memoized(None)) is dspy.ChatAdapter

    class Mine(dspy.ChatAdapter):
        def format_system_message(self, signature):
            return "mine"

    mine = Mine()
    assert memoized(mine) is mine


def test_routed_program_prompts_unchanged_and_custom_adapter_respected():
    source = ("class Solver(dspy.Module):\n    def __init__(self):\n        super().__init__()\n"
              "        self.solve = dspy.Predict('question -> answer')\n\n"
              "    def forward(self, question):\n        return self.solve(question=question)\n")
    lib = Library.empty(2).with_slot(1, Slot().activated("everything", source, "fast"))

    def respond(call):
        return {"slot": "1"} if "slot" in call.output_fields else {"answer": "42"}

    class Marked(dspy.ChatAdapter):
        def format_system_message(self, signature):
            return "MARK " + super().format_system_message(signature)

    systems = {}
    for name, adapter in (("default", None), ("chat", dspy.ChatAdapter()), ("custom", Marked())):
        lm = scripted_lm(respond)
        routed = RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=lm)
        try:
            with dspy.context(lm=lm, adapter=adapter):
                for q in ("a?", "b?"):
                    assert routed(question=q).answer == "42"
        finally:
            routed.sandbox.close()
        systems[name] = [c.system for c in lm.scripted.calls]
    assert len(systems["default"]) == 4                       # router + specialist, twice
    assert systems["default"] == systems["chat"]
    assert systems["custom"] == ["MARK " + s for s in systems["default"]]


def test_library_variants_share_signatures_so_the_memo_stays_warm():
    source = ("class Solver(dspy.Module):\n    def __init__(self):\n        super().__init__()\n"
              "        self.solve = dspy.Predict('question -> answer', instructions='Be brief.')\n\n"
              "    def forward(self, question):\n        return self.solve(question=question)\n")
    lib = Library.empty(2).with_slot(1, Slot().activated("everything", source, "fast"))
    lm = scripted_lm(lambda call: {"slot": "1"} if "slot" in call.output_fields else {"answer": "42"})
    base = RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=lm)
    variants = [base.with_library(lib), base.with_library(lib.with_slot(2, Slot().activated("more", source, "fast")))]
    try:
        with dspy.context(lm=lm):
            for v in variants:
                assert v(question="q?").answer == "42"
    finally:
        base.sandbox.close()
    (a,), (b,) = ([p for name, p in v._predictors.named() if name.startswith("slot1.")] for v in variants)
    assert a is not b and a.signature is b.signature          # own predictor objects, one signature class
    assert variants[0].router.signature is variants[1].router.signature
    assert a.signature.instructions == "Be brief."
