"""Drop-in, the last mile (issue 29): two compiles in one process, the student's attributes read through the
result, a routed program nested in a larger module (its predictors visible, its library saved)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import cloudpickle
import dspy
import pytest

from dspy_adaptive import RoutedProgram, route_of
from dspy_adaptive.testing import scripted_lm
from tests.core import toy
from tests.dropin.common import actor_lm, data, optimizer, routed_program
from tests.dropin.test_bugs import Outer

REPO = Path(__file__).resolve().parents[2]


def compile_once():
    train, val = data()
    with dspy.context(lm=toy.actor_lm()):
        return optimizer().compile(dspy.Predict("question -> answer"), trainset=train, valset=val)


def summary(routed):
    d = routed.detailed_results
    return [lib.content_hash for lib in d.libraries], d.val_aggregate_scores, d.total_metric_calls


# -- item 1: a second compile, and programs that share a pool another program closed --------------------------

def test_the_same_compile_twice_in_one_process_gives_the_same_result():
    first, second = compile_once(), compile_once()
    assert summary(first) == summary(second) and len(first.detailed_results.libraries) >= 2
    with dspy.context(lm=toy.actor_lm()):
        assert first(question="add: 2 3").answer == second(question="add: 2 3").answer == "5"
        first.close()                                    # the first result's pool is gone ...
        third = compile_once()                           # ... a third compile does not care
        assert summary(third) == summary(second)
        for prog in (first, *first.detailed_results.candidates[1:]):    # nor does anything that shared it
            pred = prog(question="add: 2 3")
            assert pred.answer == "5" and route_of(pred).executed == 1
    for prog in (first, second, third):
        prog.close()


def test_a_copy_keeps_working_when_the_program_that_owned_its_pool_closes_it():
    rp = routed_program()
    clone = rp.deepcopy()
    assert clone.sandbox is rp.sandbox                   # shared, owned by rp
    rp.close()
    pred = clone(question="add: 1 2")
    assert pred.answer == "polished draft:add: 1 2" and route_of(pred).executed == 1
    assert clone.sandbox is not rp.sandbox and not clone.sandbox.closed   # a pool of its own now
    clone.close()
    rp.close()


# -- item 2: the student's attributes ----------------------------------------------------------------------

class TimeReader(dspy.Module):
    def __init__(self):
        super().__init__()
        self.hour_predictor = dspy.Predict("question -> answer")
        self.library = "the student's own 'library' attribute"
        self.note = "a plain attribute"

    def forward(self, question):
        return self.hour_predictor(question=question)


def test_reads_of_the_students_attributes_resolve_to_the_frozen_fallback():
    train, val = data()
    with dspy.context(lm=toy.actor_lm()):
        optimized = optimizer().compile(TimeReader(), trainset=train, valset=val)
    assert optimized.hour_predictor is optimized.fallback.hour_predictor
    assert optimized.hour_predictor.signature.instructions == TimeReader().hour_predictor.signature.instructions
    assert optimized.note == "a plain attribute"
    assert optimized.library.active_ids() == (1,)        # the routed program's own attributes come first
    assert optimized.detailed_results.candidates[1].hour_predictor is optimized.fallback.hour_predictor
    with pytest.raises(AttributeError, match="nor has its fallback"):
        optimized.no_such_attribute  # noqa: B018
    with pytest.raises(AttributeError, match="program.fallback.note"):
        optimized.note = "changed"                       # would shadow the fallback's: refused, saying where
    optimized.extra = 1                                  # a name the student does not have is the program's own
    assert optimized.extra == 1 and not hasattr(optimized.fallback, "extra")
    for other in (copy.deepcopy(optimized), optimized.deepcopy(), cloudpickle.loads(cloudpickle.dumps(optimized))):
        assert other.hour_predictor is other.fallback.hour_predictor and other.note == "a plain attribute"
        assert other.library == optimized.library
    optimized.close()


def test_a_half_built_routed_program_reads_nothing_from_a_fallback():
    blank = RoutedProgram.__new__(RoutedProgram)         # as copy/pickle make it, before its state is set
    assert not hasattr(blank, "hour_predictor") and not hasattr(blank, "history")


# -- item 6: nested in a larger module ------------------------------------------------------------------------

def test_a_larger_module_sees_and_sets_every_predictor_of_a_routed_program_inside_it():
    rp = routed_program(bind_lms=False)
    outer = Outer(rp)
    names = [n for n, _ in outer.named_predictors()]
    assert names == ["pre", "routed.router", "routed.slot1.draft.predict", "routed.slot1.polish", "routed.fallback"]
    lm = actor_lm()
    outer.set_lm(lm)
    assert all(p.lm is lm for _, p in outer.named_predictors()) and outer.get_lm() is lm
    with dspy.context(lm=scripted_lm(lambda call: {"answer": "not this one"})):   # the configured LM is not used
        pred = outer(question="add: 1 2")
    assert pred.answer == "polished draft:add: 1 2" and len(lm.scripted.calls) == 3   # router + both steps
    rp.router.demos = [dspy.Example(question="add: 1 1", specialists="...", slot="1")]
    rp.named_predictors()
    outer.set_lm(None)
    assert dict(outer.named_parameters())["routed.library"].dump_state() == rp.dump_state()
    rp.close()


def test_outer_save_and_load_carry_the_library_in_a_fresh_process(tmp_path):
    rp = routed_program(bind_lms=False)
    dict(rp.named_predictors())["slot1.polish"].demos = [dspy.Example(question="q", draft="d", answer="a")]
    Outer(rp).save(str(tmp_path / "outer.json"))
    rp.close()
    script = textwrap.dedent(f"""
        import json, dspy
        from dspy_adaptive import RoutedProgram, route_of
        from tests.dropin.common import actor_lm
        from tests.dropin.test_bugs import Outer
        outer = Outer(RoutedProgram(dspy.Predict("question -> answer")))     # an empty library before load
        outer.load({str(tmp_path / "outer.json")!r})
        lm = actor_lm()
        outer.set_lm(lm)
        pred = outer(question="add: 5 5")
        preds = dict(outer.named_predictors())
        print(json.dumps({{"answer": pred.answer, "executed": route_of(pred).executed, "names": list(preds),
                          "demos": len(preds["routed.slot1.polish"].demos), "calls": len(lm.scripted.calls),
                          "all_set": all(p.lm is lm for p in preds.values())}}))
        outer.routed.close()
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"answer": "polished draft:add: 5 5", "executed": 1, "demos": 1, "calls": 3, "all_set": True,
                   "names": ["pre", "routed.router", "routed.slot1.draft.predict", "routed.slot1.polish",
                             "routed.fallback"]}


def test_a_routed_program_marked_compiled_is_still_walked_and_saved():
    rp = routed_program(bind_lms=False)
    rp._compiled = True                                  # what dspy's teleprompters set on what they return
    outer = Outer(rp)
    assert "routed.library" in dict(outer.named_parameters()) and "routed.router" in dict(outer.named_predictors())
    rp.close()
