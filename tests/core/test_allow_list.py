"""One module allow-list: what the reflection prompt tells the LM is exactly what the sandbox policy accepts
(the FPA baseline's note is checked in tests/bench_run/test_baselines.py)."""

import re

import pytest

from dspy_adaptive.reflection.propose import program_contract
from dspy_adaptive.sandbox import ALLOWED_MODULES, compile_program


def _listed(text: str) -> list[str]:
    m = re.search(r"Allowed imports: ([^.;]*)[.;]", text)
    assert m, text
    return [name.strip() for name in m.group(1).split(",")]


def test_the_reflection_prompt_lists_the_policy_allow_list():
    assert _listed(program_contract(("question",), ("answer",), ())) == list(ALLOWED_MODULES)


@pytest.mark.parametrize("module", ALLOWED_MODULES)
def test_every_listed_module_passes_the_policy(module):
    source = (f"import {module}\n\nclass Solver(dspy.Module):\n    def __init__(self):\n        super().__init__()\n\n"
              "    def forward(self, question):\n        return dspy.Prediction(answer=question)\n")
    assert compile_program(source).ok, compile_program(source).reasons
