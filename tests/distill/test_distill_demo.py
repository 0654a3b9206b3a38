"""benchmarks.distill_demo: the demo library it distils is made of programs the sandbox accepts, one per family."""

from __future__ import annotations

from benchmarks.distill_demo import SPECIALISTS, library
from dspy_adaptive.sandbox.compiler import compile_program


def test_the_demo_library_has_one_accepted_specialist_per_family():
    lib = library(["search"])
    assert list(lib.active_ids()) == list(range(1, len(SPECIALISTS) + 1))
    for slot in lib.slots:
        compiled = compile_program(slot.program_source)
        assert compiled.ok, compiled.reasons
    assert "search(query=" in lib.slots[1].program_source          # multi-hop retrieves with the demo's tool
