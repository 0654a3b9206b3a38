"""One module allow-list: what the reflection prompt tells the LM is exactly what the sandbox policy accepts
(the FPA baseline's note is checked in tests/bench_run/test_baselines.py)."""

import re

import pytest

from dspy_adaptive.reflection.propose import program_contract
from dspy_adaptive.sandbox import ALLOWED_MODULES, compile_program


def _listed(text: str) -> list[str]:
    m = re.search(r"Allowed imports: (.*?) -- ", text)
    assert m, text
    return [name.strip() for name in m.group(1).split(",")]


def test_the_reflection_prompt_lists_the_policy_allow_list():
    assert _listed(program_contract(("question",), ("answer",), ())) == list(ALLOWED_MODULES)


@pytest.mark.parametrize("module", ALLOWED_MODULES)
def test_every_listed_module_passes_the_policy(module):
    source = (f"import {module}\n\nclass Solver(dspy.Module):\n    def __init__(self):\n        super().__init__()\n\n"
              "    def forward(self, question):\n        return dspy.Prediction(answer=question)\n")
    assert compile_program(source).ok, compile_program(source).reasons


def _solver(header: str) -> str:
    return (f"{header}\n\nclass Solver(dspy.Module):\n    def __init__(self):\n        super().__init__()\n\n"
            "    def forward(self, question):\n        return dspy.Prediction(answer=question)\n")


def test_every_name_the_prompt_lists_passes_the_policy_and_others_do_not():
    from dspy_adaptive.sandbox.allowlist import ALLOWED_NAMES

    text = program_contract(("question",), ("answer",), ())
    for module, names in re.findall(r"(\w+): ((?:\w+, )*\w+)[;.]", text.split("only the names listed: ")[1]):
        assert set(names.split(", ")) == set(ALLOWED_NAMES[module])
        for name in names.split(", "):
            assert compile_program(_solver(f"from {module} import {name}")).ok, (module, name)
    for module, name in [("functools", "update_wrapper"), ("functools", "wraps"), ("typing", "get_origin"),
                         ("typing", "Type"), ("decimal", "DefaultContext"), ("json", "decoder")]:
        res = compile_program(_solver(f"from {module} import {name}"))
        assert not res.ok and f"{module}.{name} is not allowed" in res.reasons[0]
