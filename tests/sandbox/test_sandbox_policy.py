"""Static policy and host-side compile: nothing runs here."""

from __future__ import annotations

import pytest

from dspy_adaptive.sandbox import check, compile_program

BENIGN = '''import re

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.draft = dspy.ChainOfThought("question -> answer")
        self.check = dspy.Predict("question, answer -> verdict, fixed_answer", instructions="Check the answer.")

    def forward(self, question):
        d = self.draft(question=question)
        c = self.check(question=question, answer=d.answer)
        ans = c.fixed_answer if c.verdict.strip().lower().startswith("wrong") else d.answer
        hits = search(query=question, k=3)   # a tool handed in by name (only if configured)
        return dspy.Prediction(answer=re.sub(r"\\s+", " ", ans).strip())
'''


def test_benign_example_is_allowed():
    assert check(BENIGN) == []
    res = compile_program(BENIGN)
    assert res.ok and res.reasons == ()
    assert res.program.class_name == "Solver" and len(res.program.source_hash) == 64
    assert compile_program(BENIGN) is res  # cached by source hash


def test_import_dspy_and_helpers_constants_allowed():
    src = ('import dspy\nimport math, json\nfrom collections import Counter\nPROFILE = "deep"\n\n'
           'def norm(s):\n    return s.strip().lower()\n\n'
           'class QA(dspy.Signature):\n    """Answer."""\n    question: str = dspy.InputField()\n'
           '    answer: str = dspy.OutputField()\n\n'
           'class Solver(dspy.Module):\n    def __init__(self):\n        super().__init__()\n'
           '        self.p = dspy.Predict(QA)\n\n    @staticmethod\n    def helper(x):\n        return x\n\n'
           '    def forward(self, question):\n        n = 0\n        n += 1\n'
           '        return dspy.Prediction(answer=norm(f"{question}{n}"))\n')
    assert check(src) == []
    assert compile_program(src).ok


def test_syntax_error_reason():
    res = compile_program("class Solver(dspy.Module)\n    pass\n")
    assert not res.ok and res.program is None
    assert len(res.reasons) == 1 and res.reasons[0].startswith("line 1: syntax error")


def test_compile_stage_error_is_reported():
    res = compile_program("return 1\n")
    assert not res.ok and "line 1" in res.reasons[0]


def test_missing_module_class():
    res = compile_program("X = 1\n\nclass Helper:\n    pass\n")
    assert not res.ok and "no dspy.Module subclass" in res.reasons[0]


def test_duplicate_module_class():
    src = ("class A(dspy.Module):\n    def forward(self, x):\n        return dspy.Prediction(a=x)\n\n"
           "class B(dspy.Module):\n    def forward(self, x):\n        return dspy.Prediction(a=x)\n")
    res = compile_program(src)
    assert not res.ok and "found 2 dspy.Module subclasses" in res.reasons[0] and "A (line 1)" in res.reasons[0]


def test_missing_forward():
    res = compile_program("from dspy import Module\n\nclass A(Module):\n    def run(self, x):\n        return x\n")
    assert not res.ok and res.reasons == ("line 3: class 'A' has no forward method",)


def test_import_reason_lists_allowed_modules():
    reasons = check("import os\n")
    assert reasons == ["line 1: import of 'os' is not allowed (allowed: collections, datetime, decimal, fractions, "
                       "functools, heapq, itertools, json, math, re, statistics, string, typing, dspy)"]


def test_one_reason_per_violation_with_lines():
    src = "import os\nx = eval('1')\ny = ().__class__\nz = '{0}'.format(1)\n"
    reasons = check(src)
    assert [r.split(":")[0] for r in reasons] == ["line 1", "line 2", "line 3", "line 4"]
    assert "'eval'" in reasons[1] and "'__class__'" in reasons[2] and "'format'" in reasons[3]


@pytest.mark.parametrize("src,needle", [
    ("getattr(1, 'real')\n", "'getattr'"),
    ("type('X', (), {})\n", "type()"),
    ("@property\ndef f():\n    pass\n", None),
    ("import functools\n@functools.lru_cache\ndef f():\n    pass\n", "decorator"),
    ("class A(metaclass=type):\n    pass\n", "metaclass"),
    ("from typing import get_type_hints\n", "get_type_hints"),
    ("def _f():\n    pass\n", "'_f'"),
    ("def f():\n    x = 1\n    def g():\n        nonlocal x\n", "nonlocal"),
])
def test_specific_rules(src, needle):
    reasons = check(src)
    if needle is None:
        assert reasons == []
    else:
        assert reasons and any(needle in r for r in reasons), reasons


def test_the_worker_side_denied_attributes_cover_restrictedpythons():
    """allowlist.DENIED_ATTRIBUTES is spelled out so workers need not import RestrictedPython: it must keep
    covering RestrictedPython's own INSPECT_ATTRIBUTES (and the policy uses both)."""
    from RestrictedPython.transformer import INSPECT_ATTRIBUTES

    from dspy_adaptive.sandbox import allowlist, policy

    assert set(INSPECT_ATTRIBUTES) <= allowlist.DENIED_ATTRIBUTES <= policy.DENIED_ATTRIBUTES


def test_the_worker_image_stays_small():
    """Every request forks the zygote, so its image is paid per call: no compiler, no libseccomp, no inspect."""
    import subprocess
    import sys
    from pathlib import Path

    import dspy_adaptive.sandbox as sb

    code = ("import sys; sys.path.insert(0, sys.argv[1]); import worker; "
            "worker.preimport({'tools': [], 'stdout_cap': 100, 'max_predictor_calls': 1}); "
            "print(' '.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(Path(sb.__file__).parent)],
                         capture_output=True, text=True, check=True).stdout.split()
    for heavy in ("RestrictedPython", "pyseccomp", "ast", "inspect", "dataclasses", "dspy", "pydantic"):
        assert heavy not in out, heavy


@pytest.mark.parametrize("expr", ["1+" * 300 + "1", "-" * 300 + "1", "a." * 300 + "b", "not " * 400 + "x",
                                  "1+" * 100_000 + "1"])
def test_deep_nesting_is_a_clean_rejection_whatever_the_callers_stack(expr):
    from dspy_adaptive.sandbox.compiler import _CACHE

    src = (f"class Solver(dspy.Module):\n    def forward(self, x):\n        y = {expr}\n"
           "        return dspy.Prediction(a=y)\n")

    def deep(n):   # the caller's own stack is nearly exhausted: the check must not depend on it
        if n:
            return deep(n - 1)
        _CACHE.clear()
        return compile_program(src)

    res = deep(900)
    assert not res.ok and "nests" in res.reasons[0]
    assert check(src) and "nests" in check(src)[0]
