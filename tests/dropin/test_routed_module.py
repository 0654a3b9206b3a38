"""RoutedProgram behaves like any DSPy module: named_predictors with stable names, set_lm, acall, Evaluate with
threads, batch, BootstrapFewShot and dspy.GEPA over a routed program, save/load in a fresh process."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import dspy
import pytest

from dspy_adaptive import RoutedProgram, route_of
from dspy_adaptive.testing import scripted_lm
from tests.dropin.common import TWO_STEP, respond, routed_program

REPO = Path(__file__).resolve().parents[2]
NAMES = ["router", "slot1.draft.predict", "slot1.polish", "fallback"]


@pytest.fixture
def rp():
    prog = routed_program()
    yield prog
    prog.close()


def test_named_predictors_are_stable_and_cover_router_specialists_and_fallback(rp):
    names = [n for n, _ in rp.named_predictors()]
    assert names == NAMES
    again = [n for n, _ in rp.deepcopy().named_predictors()]
    assert again == NAMES
    preds = dict(rp.named_predictors())
    assert preds["slot1.polish"].signature.instructions == "Polish the draft answer."
    assert list(preds["slot1.polish"].signature.input_fields) == ["question", "draft"]
    assert preds["fallback"] is rp.fallback
    # the objects named are the ones that run: a DSPy trace names them
    with dspy.context(trace=[]):
        rp(question="add: 1 2")
        traced = [p for p, _, _ in dspy.settings.trace]
    assert [rp.predictor_label(p) for p in traced] == ["router", "slot1.draft", "slot1.polish"]
    assert traced[0] is preds["router"] and traced[1] is preds["slot1.draft.predict"]
    assert traced[2] is preds["slot1.polish"]


def test_set_lm_reaches_every_predictor_including_sandboxed_ones(rp):
    other = scripted_lm(lambda call: {"slot": "1"} if "slot" in call.output_fields else
                        {"reasoning": "r", "answer": "OTHER"}, model="scripted/other")
    rp.set_lm(other)
    assert all(p.lm is other for _, p in rp.named_predictors())
    pred = rp(question="add: 1 2")
    assert pred.answer == "OTHER" and len(other.scripted.calls) == 3    # router + both specialist steps
    assert rp.get_lm() is other


def test_instruction_changes_reach_the_sandboxed_call(rp):
    polish = dict(rp.named_predictors())["slot1.polish"]
    polish.signature = polish.signature.with_instructions("NEW POLISH INSTRUCTIONS")
    rp(question="add: 1 2")
    seen = [c for c in rp.fast_lm.scripted.calls if c.field("draft") is not None][-1]
    assert "NEW POLISH INSTRUCTIONS" in seen.system
    router = rp.router
    router.signature = router.signature.with_instructions("Route well.")
    assert rp.library.router == "Route well."                         # the library follows its router


def test_acall_and_aforward(rp):
    pred = asyncio.run(rp.acall(question="add: 2 3"))
    assert route_of(pred).executed == 1 and pred.answer == "polished draft:add: 2 3"
    pred = asyncio.run(rp.acall(question="upper: abc"))
    assert route_of(pred).executed == 0 and pred.answer == "UPPER: ABC"


def test_evaluate_with_threads_and_batch(rp):
    dev = [dspy.Example(question=f"add: {i} {i}", answer=f"polished draft:add: {i} {i}").with_inputs("question")
           for i in range(6)]
    dev += [dspy.Example(question="upper: x", answer="UPPER: X").with_inputs("question")]
    result = dspy.Evaluate(devset=dev, metric=lambda g, p, t=None: g.answer == p.answer, num_threads=4)(rp)
    assert result.score == 100.0
    outs = rp.batch(dev, num_threads=3)
    assert [o.answer for o in outs] == [e.answer for e in dev]


def test_bootstrap_fewshot_over_a_routed_program_changes_it(rp):
    train = [dspy.Example(question=f"add: {i} 1", answer=f"polished draft:add: {i} 1").with_inputs("question")
             for i in range(3)]
    compiled = dspy.BootstrapFewShot(metric=lambda g, p, t=None: g.answer == p.answer, max_bootstrapped_demos=2,
                                     max_labeled_demos=0).compile(rp, trainset=train)
    demos = {n: len(p.demos) for n, p in compiled.named_predictors()}
    assert demos["router"] == 2 and demos["slot1.polish"] == 2 and demos["slot1.draft.predict"] == 2
    assert all(len(p.demos) == 0 for _, p in rp.named_predictors())          # the student is untouched
    compiled(question="add: 9 9")
    polish_call = [c for c in rp.fast_lm.scripted.calls if c.field("draft") is not None][-1]
    assert len(polish_call.messages) > 1                                    # the demos reached the sandboxed call
    compiled.close()


def terse_respond(call):
    """Like `respond`, but a predictor told to "Answer tersely." answers right."""
    if "Answer tersely." not in call.system or "slot" in call.output_fields:
        return respond(call)
    q = call.field("question") or ""
    answer = str(sum(int(x) for x in q.split()[1:])) if q.startswith("add:") else q.split(":", 1)[1].strip().upper()
    return {"reasoning": "r", "answer": answer}


def test_dspy_gepa_over_a_routed_program_changes_it():
    lm = scripted_lm(terse_respond, model="scripted/terse")
    rp = routed_program(lm)
    train = [dspy.Example(question="add: 1 1", answer="2").with_inputs("question"),
             dspy.Example(question="upper: ab", answer="AB").with_inputs("question")]

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        return dspy.Prediction(score=float(gold.answer == pred.answer), feedback="Return only the answer.")

    reflection = scripted_lm(lambda call: {"new_instruction": "Answer tersely."}, model="scripted/reflection")
    with dspy.context(lm=lm):
        opt = dspy.GEPA(metric=metric, reflection_lm=reflection, max_metric_calls=40, track_stats=True,
                        component_selector="all")
        out = opt.compile(rp, trainset=train, valset=train)
        assert isinstance(out, RoutedProgram)
        assert out.detailed_results.val_aggregate_scores[out.detailed_results.best_idx] == 1.0
        changed = {n for n, p in out.named_predictors() if p.signature.instructions == "Answer tersely."}
        assert changed == set(NAMES)
        assert out.library.router == "Answer tersely." and out(question="add: 2 5").answer == "7"
    assert all(p.signature.instructions != "Answer tersely." for _, p in rp.named_predictors())   # student kept
    rp.close()


def test_save_and_load_in_a_fresh_process(rp, tmp_path):
    rp.named_predictors()
    dict(rp.named_predictors())["slot1.polish"].demos = [dspy.Example(question="q", draft="d", answer="a")]
    rp.save(str(tmp_path / "routed.json"))
    script = textwrap.dedent(f"""
        import json, dspy
        from dspy_adaptive import RoutedProgram, route_of
        from tests.dropin.common import actor_lm
        lm = actor_lm()
        prog = RoutedProgram(dspy.Predict("question -> answer"), fast_lm=lm, deep_lm=lm)
        prog.load({str(tmp_path / "routed.json")!r})
        pred = prog(question="add: 4 4")
        names = [n for n, _ in prog.named_predictors()]
        demos = len(dict(prog.named_predictors())["slot1.polish"].demos)
        print(json.dumps({{"answer": pred.answer, "executed": route_of(pred).executed, "names": names,
                          "demos": demos}}))
        prog.close()
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"answer": "polished draft:add: 4 4", "executed": 1, "names": NAMES, "demos": 1}


def test_specialist_predictor_states_survive_a_copy_and_a_reset(rp):
    polish = dict(rp.named_predictors())["slot1.polish"]
    polish.demos = [dspy.Example(question="q", draft="d", answer="a")]
    copy = rp.deepcopy()
    assert dict(copy.named_predictors())["slot1.polish"] is not polish
    assert len(dict(copy.named_predictors())["slot1.polish"].demos) == 1
    reset = rp.reset_copy()
    assert all(len(p.demos) == 0 for _, p in reset.named_predictors()) and reset.library == rp.library
    assert len(polish.demos) == 1


def test_a_source_without_predictors_and_one_that_fails_to_build():
    from dspy_adaptive import Library, Slot
    plain = ("class Echo(dspy.Module):\n    def forward(self, question):\n"
             "        return dspy.Prediction(answer=question)\n")
    broken = ("class Bad(dspy.Module):\n    def __init__(self):\n        super().__init__()\n        x = [][1]\n\n"
              "    def forward(self, question):\n        return dspy.Prediction(answer=question)\n")
    lib = Library.empty(2).with_slot(1, Slot().activated("echo", plain, "fast")).with_slot(
        2, Slot().activated("bad", broken, "fast"))
    lm = scripted_lm(respond)
    rp = RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=lm, deep_lm=lm)
    assert [n for n, _ in rp.named_predictors()] == ["router", "fallback"]
    rp.close()


def test_two_step_source_is_the_one_under_test():
    assert "self.polish" in TWO_STEP


def test_a_submodule_save_loads_in_a_fresh_process(rp, tmp_path):
    from tests.dropin.test_bugs import Outer
    rp.router.demos = [dspy.Example(question="add: 1 1", specialists="...", slot="1")]
    Outer(rp).save(str(tmp_path / "outer.json"))
    script = textwrap.dedent(f"""
        import json, dspy
        from dspy_adaptive import RoutedProgram, route_of
        from tests.dropin.common import actor_lm
        from tests.dropin.test_bugs import Outer
        lm = actor_lm()
        outer = Outer(RoutedProgram(dspy.Predict("question -> answer"), fast_lm=lm, deep_lm=lm))
        outer.load({str(tmp_path / "outer.json")!r})
        pred = outer(question="add: 5 5")
        print(json.dumps({{"answer": pred.answer, "executed": route_of(pred).executed,
                          "router_demos": len(outer.routed.router.demos)}}))
        outer.routed.close()
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"answer": "polished draft:add: 5 5", "executed": 1, "router_demos": 1}
