"""RoutedProgram: route -> resolve -> execute -> record, with scripted LMs (no network)."""

from __future__ import annotations

import json

import dspy
import pytest

from dspy_adaptive import Library, RoutedProgram, Slot, SpecialistRuntimeError, route_of
from dspy_adaptive.testing import scripted_lm

TWO_STEP = '''
import re

class TwoStep(dspy.Module):
    def __init__(self):
        super().__init__()
        self.draft = dspy.ChainOfThought("question -> answer")
        self.polish = dspy.Predict("question, draft -> answer", instructions="Polish the draft answer.")

    def forward(self, question):
        d = self.draft(question=question)
        p = self.polish(question=question, draft=d.answer)
        return dspy.Prediction(answer=re.sub(r"\\s+", " ", p.answer).strip() + "!")
'''

RAISES = '''
class Boom(dspy.Module):
    def forward(self, question):
        numbers = [1, 2]
        return dspy.Prediction(answer=str(numbers[5]))
'''

POLICY_FAIL = '''
import subprocess

class Bad(dspy.Module):
    def forward(self, question):
        return dspy.Prediction(answer=subprocess.check_output(["id"]).decode())
'''

SYNTAX_FAIL = "class Broken(dspy.Module):\n    def forward(self, question)\n        return 1\n"


def router_says(answer):
    def respond(call):
        if "slot" in call.output_fields:
            return {"slot": answer(call) if callable(answer) else answer}
        if call.field("draft") is not None:
            return {"answer": "polished   " + call.field("draft")}
        return {"reasoning": "think", "answer": "fallback:" + (call.field("question") or "")}
    return respond


def library(*slots: tuple[int, str, str]) -> Library:
    lib = Library.empty(3)
    for k, source, profile in slots:
        lib = lib.with_slot(k, Slot().activated(f"specialist {k}", source, profile))
    return lib


@pytest.fixture
def lm():
    return scripted_lm(router_says("1"), model="scripted/fast")


def test_routes_to_an_active_slot_and_both_predictor_calls_are_traced(lm):
    rp = RoutedProgram(dspy.Predict("question -> answer"), library((1, TWO_STEP, "fast")), fast_lm=lm, deep_lm=lm)
    with dspy.context(trace=[]):
        pred = rp(question="what?")
        trace = dspy.settings.trace
    r = route_of(pred)
    assert (r.selected, r.executed, r.fallback_reason) == (1, 1, None)
    assert pred.answer == "polished fallback:what?!"
    labels = [rp.predictor_label(p) for p, _, _ in trace]
    assert labels == ["router", "slot1.draft", "slot1.polish"]
    assert trace[2][1]["draft"] == "fallback:what?"
    assert set(pred.keys()) == {"answer"}   # the route is not a field the metric sees


@pytest.mark.parametrize("answer, reason", [
    ("2", "not an active specialist"),           # inactive slot
    ("7", "not an active specialist"),           # out of range
    ("I think the best is the math one", "not a slot number"),  # garbage
    ("0", None),                                 # explicit fallback
])
def test_unusable_router_answers_resolve_to_the_fallback(answer, reason):
    lm = scripted_lm(router_says(answer))
    rp = RoutedProgram(dspy.Predict("question -> answer"), library((1, TWO_STEP, "fast")), fast_lm=lm, deep_lm=lm)
    pred = rp(question="q")
    r = route_of(pred)
    assert r.executed == 0 and pred.answer == "fallback:q"
    assert (r.fallback_reason is None) if reason is None else (reason in r.fallback_reason)


@pytest.mark.parametrize("source, words", [(POLICY_FAIL, "subprocess"), (SYNTAX_FAIL, "yntax")])
def test_slot_that_fails_policy_or_compile_resolves_to_fallback_with_reason(source, words):
    lm = scripted_lm(router_says("1"))
    rp = RoutedProgram(dspy.Predict("question -> answer"), library((1, source, "fast")), fast_lm=lm, deep_lm=lm)
    pred = rp(question="q")
    r = route_of(pred)
    assert r.selected == 1 and r.executed == 0 and "does not compile" in r.fallback_reason
    assert words in r.fallback_reason
    assert pred.answer == "fallback:q"


def test_runtime_exception_is_not_rerouted(lm):
    rp = RoutedProgram(dspy.Predict("question -> answer"), library((1, RAISES, "fast")), fast_lm=lm, deep_lm=lm)
    with pytest.raises(SpecialistRuntimeError) as info:
        rp(question="q")
    r = route_of(info.value)
    assert r.executed == 1 and "IndexError" in r.error


def test_router_on_fast_lm_specialist_on_its_profile_lm():
    fast = scripted_lm(router_says(lambda call: "2" if "deep one" in (call.field("question") or "") else "1"),
                       model="scripted/fast")
    deep = scripted_lm(router_says("1"), model="scripted/deep")
    rp = RoutedProgram(dspy.Predict("question -> answer"),
                       library((1, TWO_STEP, "fast"), (2, TWO_STEP, "deep")), fast_lm=fast, deep_lm=deep)
    rp(question="fast one")
    assert len(fast.scripted.calls) == 3 and len(deep.scripted.calls) == 0    # router + 2 steps, all fast
    rp(question="deep one")
    assert len(fast.scripted.calls) == 4 and len(deep.scripted.calls) == 2    # router fast; specialist deep
    assert all("slot" in c.output_fields for c in fast.scripted.calls[3:])


def test_fallback_runs_on_deep_lm_and_no_router_call_without_active_slots():
    fast = scripted_lm(router_says("1"), model="scripted/fast")
    deep = scripted_lm(router_says("1"), model="scripted/deep")
    rp = RoutedProgram(dspy.Predict("question -> answer"), Library.empty(2), fast_lm=fast, deep_lm=deep)
    assert rp(question="q").answer == "fallback:q"
    assert len(fast.scripted.calls) == 0 and len(deep.scripted.calls) == 1


def test_router_sees_only_active_descriptions_and_inputs(lm):
    lib = library((1, TWO_STEP, "fast")).with_slot(3, Slot(program_source="class Hidden: pass"))
    rp = RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=lm, deep_lm=lm)
    rp(question="route me")
    prompt = lm.scripted.calls[0].prompt
    assert "1: specialist 1" in prompt and "route me" in prompt
    assert "INACTIVE" not in prompt and "Hidden" not in prompt and "class TwoStep" not in prompt


def test_fallback_is_a_frozen_copy():
    program = dspy.Predict("question -> answer")
    rp = RoutedProgram(program, Library.empty(1))
    assert rp.fallback is not program
    program.signature = program.signature.with_instructions("changed later")
    assert rp.fallback.signature.instructions != "changed later"


def test_save_load_round_trip_routes_and_answers_the_same(tmp_path, lm):
    lib = library((1, TWO_STEP, "fast"), (2, RAISES, "deep"))
    rp = RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=lm, deep_lm=lm)
    path = tmp_path / "routed.json"
    rp.save(str(path))
    assert json.loads(path.read_text())["library"]["slots"][1]["profile"] == "deep"
    loaded = RoutedProgram(dspy.Predict("question -> answer"), fast_lm=lm, deep_lm=lm, max_specialists=3)
    loaded.load(str(path))
    assert loaded.library == lib
    a, b = rp(question="x"), loaded(question="x")
    assert a.answer == b.answer and route_of(a) == route_of(b)


def test_export_writes_readable_files(tmp_path):
    rp = RoutedProgram(dspy.Predict("question -> answer"), library((2, TWO_STEP, "deep")))
    out = rp.export(tmp_path / "lib")
    assert (out / "router.txt").read_text().strip() == rp.library.router
    assert (out / "slot_2" / "program.py").read_text() == TWO_STEP
    assert (out / "slot_2" / "description.txt").read_text().strip() == "specialist 2"
    assert (out / "slot_2" / "profile").read_text().strip() == "deep"
    assert (out / "slot_1" / "description.txt").read_text().strip() == "INACTIVE"
    assert Library.from_json((out / "library.json").read_text()) == rp.library


DEEP = ("class Deep(dspy.Module):\n    def forward(self, question):\n        y = " + "1+" * 5000 + "1\n"
        "        return dspy.Prediction(answer=str(y))\n")


@pytest.mark.parametrize("source", [DEEP, DEEP.replace("1+" * 5000, "1+" * 250)])
def test_a_source_that_nests_too_deeply_is_a_clean_rejection_and_routes_to_the_fallback(lm, source):
    """Deep nesting used to raise RecursionError in the policy's visitor, out of routed(...), on every request
    sent to that slot; now it is a rejection with a reason, and the request is served by the fallback."""
    rp = RoutedProgram(dspy.Predict("question -> answer"), library((1, source, "fast")), fast_lm=lm, deep_lm=lm)
    for _ in range(2):
        pred = rp(question="q")
        r = route_of(pred)
        assert (r.selected, r.executed) == (1, 0) and "nests" in r.fallback_reason
        assert pred.answer == "fallback:q"


def test_a_routed_request_does_not_parse_the_specialist_source_again(lm, monkeypatch):
    import ast

    big = TWO_STEP + "".join(f"\nHELPER_{i} = {i}\n" for i in range(2000))
    rp = RoutedProgram(dspy.Predict("question -> answer"), library((1, big, "fast")), fast_lm=lm, deep_lm=lm)
    rp(question="warm-up")
    parses = []
    real_parse = ast.parse
    monkeypatch.setattr(ast, "parse", lambda src, *a, **k: parses.append(len(src)) or real_parse(src, *a, **k))
    for _ in range(3):
        assert rp(question="again").answer.endswith("!")
    assert [n for n in parses if n >= len(big)] == []
