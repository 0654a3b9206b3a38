"""Names a bridged predictor's fields may not take, read from DSPy itself (host only).

A host `dspy.Predict` is called as `predictor(**inputs)`: an input field named after one of the
keyword arguments DSPy's predictor machinery consumes (`config`, `demos`, `lm`, `signature`,
`prediction`, ...) would not reach the prompt as a field -- DSPy would take it as that argument
(`config={"n": 25}` turned one counted call into 26 LM calls; `demos` went into the prompt). A field
named after a parameter of that call chain (`self`, `completions`, `instance`, ...) collides with it.

Rather than a hand-written list that goes stale when DSPy changes, the names are read from DSPy's own
code: the named parameters of every method a predictor call goes through (`__call__`, `acall`,
`forward`, `aforward`, `_forward_preprocess`, `_forward_postprocess` of `dspy.Predict`,
`dspy.ChainOfThought` and `dspy.Module`, wrappers included), and every string those methods look up in
their `**kwargs` (`kwargs.pop("demos")`, `kwargs.get(...)`, `"prediction" in kwargs`, `kwargs["..."]`).
`FALLBACK` holds what this reading found for DSPy 3.4, used when the source cannot be read.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap

import dspy

METHODS = ("__init__", "__call__", "acall", "forward", "aforward", "_forward_preprocess", "_forward_postprocess")
FALLBACK = frozenset({"self", "signature", "callbacks", "config", "demos", "lm", "new_signature", "prediction",
                      "completions", "instance", "rationale_field", "rationale_field_type", "_trace"})


def _kwargs_name(fn) -> str | None:
    for p in inspect.signature(fn).parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            return p.name
    return None


def _looked_up(fn, kwargs: str) -> set[str]:
    """String constants `fn` looks up in its `**kwargs` dict."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    found: set[str] = set()

    def is_kwargs(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id == kwargs

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_kwargs(node.func.value) \
                and node.func.attr in ("pop", "get", "setdefault") and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            found.add(node.args[0].value)
        elif isinstance(node, ast.Compare) and any(is_kwargs(c) for c in node.comparators) \
                and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
            found.add(node.left.value)
        elif isinstance(node, ast.Subscript) and is_kwargs(node.value) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, str):
            found.add(node.slice.value)
    return found


def _names_of(fn) -> set[str]:
    names: set[str] = set()
    while fn is not None:
        try:
            params = inspect.signature(fn, follow_wrapped=False).parameters.values()
        except (TypeError, ValueError):
            params = ()
        names |= {p.name for p in params if p.kind not in (inspect.Parameter.VAR_POSITIONAL,
                                                            inspect.Parameter.VAR_KEYWORD)}
        kwargs = _kwargs_name(fn) if params else None
        if kwargs:
            try:
                names |= _looked_up(fn, kwargs)
            except (OSError, TypeError, SyntaxError):
                pass
        fn = getattr(fn, "__wrapped__", None)
    return names


def derived() -> frozenset[str]:
    """The names read from the installed DSPy (see the module docstring)."""
    names: set[str] = set()
    for cls in (dspy.Predict, dspy.ChainOfThought, dspy.Module):
        for meth in METHODS:
            fn = getattr(cls, meth, None)
            if fn is not None and not isinstance(fn, type(object.__init__)):   # skip C slot wrappers
                names |= _names_of(fn)
    return frozenset(names)


@functools.lru_cache(maxsize=1)
def predictor_arguments() -> frozenset[str]:
    """Every keyword a DSPy predictor call consumes or binds itself, plus FALLBACK (never fewer names)."""
    try:
        return derived() | FALLBACK
    except (OSError, TypeError):   # no source available: what DSPy 3.4's source said
        return FALLBACK
