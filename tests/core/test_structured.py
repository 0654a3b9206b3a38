"""Structured edits: the reflection LM fills a ProgramSpec; the rendered source always passes the policy and runs."""

from __future__ import annotations

import random

import dspy
import pytest

from dspy_adaptive import AdaptiveGEPA, Library, RoutedProgram, Slot, route_of
from dspy_adaptive.program.profiles import declared_profile
from dspy_adaptive.reflection.propose import Reflector
from dspy_adaptive.reflection.repair import Rejection
from dspy_adaptive.reflection.structured import (
    MODULE_KINDS,
    Contract,
    ProgramSpec,
    choose_format,
    render,
    signatures_for,
    spec_from,
)
from dspy_adaptive.sandbox import compile_program
from dspy_adaptive.schema import ProposalRecord
from dspy_adaptive.testing import scripted_lm
from tests.core import toy

HOSTILE_TEXTS = [
    "Answer briefly.",
    "''' + __import__('os').system('id') + '''",
    '"""\nimport os\nos.system("id")\n"""',
    "\\x00 \\\\ \\' \" ` ${x} {{braces}} %s",
    "\u202eevil\u202c \u200b zero width \u2028 line sep \x00 nul \x1b[31m",
    "class X(dspy.Module):\n    def forward(self):\n        return open('/etc/passwd').read()",
    "é ü 中文 🙂 " * 50,
    "x" * 20000,
]


def random_text(rng: random.Random) -> str:
    alphabet = "abc '\"\\\n\t{}()#`$%\u202e\u200b\u2028\x00\x7f中🙂"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))


@pytest.mark.parametrize("kind", MODULE_KINDS)
@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_every_kind_renders_to_a_source_the_policy_accepts(kind, text):
    contract = Contract(("request", "context"), ("answer", "confidence"), ("search",))
    spec = ProgramSpec(kind, text, second_step=text, tool="search" if kind == "retrieve_then_answer" else "")
    for profile in ("fast", "deep", None):
        source = render(spec, contract, profile)
        res = compile_program(source)
        assert res.ok, (res.reasons, source)
        assert source.isascii()                          # LM text only ever inside ASCII string literals
        assert declared_profile(source) == (profile, None)


def test_random_specs_always_pass_the_policy():
    rng = random.Random(0)
    for _ in range(200):
        kind = rng.choice(MODULE_KINDS)
        names = rng.choice([(("question",), ("answer",)), (("query", "draft"), ("passages", "answer")),
                            (("request",), ("draft", "query", "passages"))])
        spec = ProgramSpec(kind, random_text(rng), random_text(rng), "search" if kind == "retrieve_then_answer" else "")
        source = render(spec, Contract(names[0], names[1], ("search",)), rng.choice(["fast", "deep", None]))
        assert compile_program(source).ok, source


def test_field_names_the_task_already_uses_are_not_reused():
    source = render(ProgramSpec("draft_and_check", "d", "c"), Contract(("draft",), ("answer",)))
    assert "'draft -> draft_2'" in source and "'draft, draft_2 -> answer'" in source
    with pytest.raises(ValueError, match="plain"):
        render(ProgramSpec("predict", "x"), Contract(("a; import os",), ("answer",)))


def rendered_runs(kind: str, tool_calls: list[str], second: str = ""):
    def respond(call):
        if "slot" in call.output_fields:
            return {"slot": "1"}
        out = {}
        for name in call.output_fields:
            out[name] = {"query": "capital of France", "draft_2": "draft text", "draft": "draft text"}.get(
                name, f"{kind}:{call.field('passages') or call.field('draft') or call.field('question')}")
        return out

    def search(query: str, k: int = 3) -> list[str]:
        tool_calls.append(query)
        return ["Paris | the capital of France"]

    lm = scripted_lm(respond)
    spec = ProgramSpec(kind, "Answer the question.", second, tool="search" if kind == "retrieve_then_answer" else "")
    source = render(spec, Contract(("question",), ("answer",), ("search",)), "fast")
    lib = Library.empty(2).with_slot(1, Slot().activated("everything", source, "fast"))
    rp = RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=lm, deep_lm=lm, tools=[search])
    try:
        return rp(question="What is the capital of France?")
    finally:
        rp.close()


@pytest.mark.parametrize("kind", MODULE_KINDS)
def test_every_kind_runs_in_the_sandbox(kind):
    tool_calls: list[str] = []
    pred = rendered_runs(kind, tool_calls)
    assert route_of(pred).executed == 1, route_of(pred)
    assert pred.answer.startswith(kind)
    if kind == "retrieve_then_answer":
        assert tool_calls == ["What is the capital of France?"] and "Paris" in pred.answer   # the request itself
        tool_calls.clear()
        rendered_runs(kind, tool_calls, second="Write a short search query.")
        assert tool_calls == ["What is the capital of France?", "capital of France"]       # and a written query
    if kind == "draft_and_check":
        assert "draft text" in pred.answer


def prediction(**fields):
    return dspy.Prediction(**fields)


def test_spec_from_checks_kind_and_tool():
    contract = Contract(("q",), ("answer",), ("search", "lookup"))
    with pytest.raises(Rejection, match="kind") as e:
        spec_from(prediction(kind="python", main_step="x", second_step="", tool=""), contract)
    assert e.value.failure == "bad_output" and e.value.repairable
    with pytest.raises(Rejection, match="not one of the run's tools"):
        spec_from(prediction(kind="retrieve_then_answer", main_step="x", second_step="", tool="os.system"), contract)
    with pytest.raises(Rejection, match="main_step"):
        spec_from(prediction(kind="predict", main_step="  ", second_step="", tool=""), contract)
    one_tool = Contract(("q",), ("answer",), ("search",))
    assert spec_from(prediction(kind="Retrieve-Then-Answer", main_step="x", second_step="", tool=""),
                     one_tool).tool == "search"
    assert spec_from(prediction(kind="predict", main_step="x", second_step="", tool="search"), one_tool).tool == ""
    with pytest.raises(Rejection, match="has none"):
        spec_from(prediction(kind="retrieve_then_answer", main_step="x", second_step="", tool=""),
                  Contract(("q",), ("answer",)))


def spec_reflection():
    def respond(call):
        fields = call.output_fields
        if "action" in fields:
            return {"action": "activate", "slot": "1"}
        if "activation" in fields:
            assert call.json_mode                      # structured calls ask for JSON (schema-constrained locally)
            return {"activation": {"description": toy.ARITH_DESCRIPTION, "kind": "chain_of_thought",
                                   "main_step": "Add the numbers in the question.", "second_step": "", "tool": "none",
                                   "profile": "deep"}}
        raise AssertionError(f"a structured run asked for code: {fields}")
    return scripted_lm(respond, model="scripted/reflection")


def test_structured_activation_through_the_reflector():
    lib = Library.empty(2)
    rows, results = [], []
    refl = spec_reflection()
    edit = Reflector(refl, input_names=("question",), output_names=("answer",),
                     proposal_format="structured").propose(lib, rows, results)
    assert not edit.rejected and edit.format == "structured"
    slot = edit.child.slot(1)
    assert slot.profile == "deep" and "dspy.ChainOfThought('question -> answer'" in slot.program_source
    assert "Add the numbers in the question." in slot.program_source


def test_structured_search_archives_a_rendered_specialist():
    train, val = toy.make_examples(4), toy.make_examples(4, offset=100)
    with dspy.context(lm=toy.actor_lm()):
        res = AdaptiveGEPA(toy.metric, reflection_lm=spec_reflection(), max_metric_calls=40,
                           reflection_minibatch_size=4, seed=3, use_merge=False, track_stats=True, progress=False,
                           proposal_format="structured").compile(dspy.Predict("question -> answer"),
                                                                 trainset=train, valset=val).detailed_results
    reflect = [p for p in res.proposals if p["kind"] == "reflect" and p["action"] == "activate"]
    assert reflect and all(p["details"]["format"] == "structured" and p["failure"] != "sandbox_rejected"
                           for p in reflect)


def record(action, slot, failure, fmt):
    return ProposalRecord(iteration=1, kind="reflect", parents=(0,), action=action, slot=slot, minibatch=(),
                          parent_sum=0.0, child_sum=None, accepted=False, reason="x", child_index=None,
                          child_hash=None, budget_at=0, details={"format": fmt}, failure=failure)


def test_auto_turns_to_structured_after_repeated_code_rejections():
    assert choose_format("code", 9, 2) == "code" and choose_format("structured", 0, 2) == "structured"
    assert choose_format("auto", 1, 2) == "code" and choose_format("auto", 2, 2) == "structured"
    r = Reflector(None, input_names=("q",), output_names=("answer",), proposal_format="auto")
    one = [record("activate", 1, "sandbox_rejected", "code")]
    two = one + [record("activate", 2, "unparseable", "code")]
    assert r._format("activate", 1, one) == "code"
    assert r._format("activate", 1, two) == "structured"          # activations count whatever slot they chose
    assert r._format("rewrite_program", 1, two) == "code"         # another target has its own count
    rewrites = [record("rewrite_program", 1, "sandbox_rejected", "code")] * 2
    assert r._format("rewrite_program", 1, rewrites) == "structured"
    assert r._format("rewrite_program", 2, rewrites) == "code"
    gated = [record("activate", 1, "gate", "code")] * 3            # a gate failure is not a format problem
    assert r._format("activate", 1, gated) == "code"
    assert r._format("rewrite_router", None, two) is None


def test_auto_search_switches_after_code_keeps_failing():
    train, val = toy.make_examples(4), toy.make_examples(4, offset=100)

    def respond(call):
        fields = call.output_fields
        if "action" in fields:
            return {"action": "activate", "slot": "1"}
        if "activation" in fields:
            return {"activation": {"description": toy.ARITH_DESCRIPTION, "kind": "predict", "main_step": "Add.",
                                   "second_step": "", "tool": "none", "profile": "fast"}}
        return "I cannot write Python, but here is an idea."        # code: prose, never parses

    with dspy.context(lm=toy.actor_lm()):
        res = AdaptiveGEPA(toy.metric, reflection_lm=scripted_lm(respond), max_metric_calls=60,
                           reflection_minibatch_size=4, seed=3, use_merge=False, track_stats=True, progress=False,
                           proposal_format="auto").compile(dspy.Predict("question -> answer"), trainset=train,
                                                           valset=val).detailed_results
    formats = [p["details"].get("format") for p in res.proposals if p["kind"] == "reflect"]
    assert formats[:3] == ["code", "code", "structured"], formats
    assert all(p["failure"] == "unparseable" for p in res.proposals[:2] if p["kind"] == "reflect")


def test_proposal_format_is_checked():
    from dspy_adaptive.data import InputError
    with pytest.raises(InputError, match="proposal_format"):
        AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(), max_metric_calls=10, proposal_format="json")


def test_the_schema_bounds_every_text_so_a_grammar_cannot_ramble():
    from dspy.adapters.json_adapter import _get_structured_outputs_response_format

    from dspy_adaptive.lm.local import llama_response_format
    from dspy_adaptive.reflection.structured import ActivateSlotSpec, RewriteProgramSpec

    for signature, field in ((ActivateSlotSpec, "activation"), (RewriteProgramSpec, "shape")):
        schema = llama_response_format(_get_structured_outputs_response_format(signature))["schema"]
        ref = schema["properties"][field].get("$ref", "").rsplit("/", 1)[-1]
        props = schema["$defs"][ref]["properties"]
        strings = {k: v for k, v in props.items() if v.get("type") == "string" and "enum" not in v}
        assert strings and all(v.get("maxLength") for v in strings.values()), props
        assert set(props["kind"]["enum"]) == set(MODULE_KINDS)
    activate, rewrite = signatures_for(("search", "lookup"))
    for signature, field in ((activate, "activation"), (rewrite, "shape")):
        schema = llama_response_format(_get_structured_outputs_response_format(signature))["schema"]
        ref = schema["properties"][field].get("$ref", "").rsplit("/", 1)[-1]
        assert schema["$defs"][ref]["properties"]["tool"]["enum"] == ["search", "lookup", "none"]


def test_an_overlong_structured_answer_is_repaired():
    def respond(call):
        if "action" in call.output_fields:
            return {"action": "activate", "slot": "1"}
        main = "Add. " * (1 if call.field("problem") else 400)           # too long the first time
        return {"activation": {"description": toy.ARITH_DESCRIPTION, "kind": "predict", "main_step": main,
                               "second_step": "", "tool": "none", "profile": "fast"}}

    edit = Reflector(scripted_lm(respond), input_names=("question",), output_names=("answer",),
                     proposal_format="structured").propose(Library.empty(2), [], [])
    assert not edit.rejected and [a.failure for a in edit.attempts] == [None, "unparseable", None]
