"""In-worker runtime: the restricted globals one request runs under.

`request_globals(...)` returns a FRESH namespace for the one request a worker process serves:
the safe builtins (no open/exec/eval/getattr/vars/...; `type` limited to one argument and never
returning a metaclass; `hasattr` guarded), RestrictedPython's guard hooks (`_getattr_`,
`_getitem_`, `_getiter_`, `_write_`, `_inplacevar_`, `_apply_`, unpack guards, `_print_` into a
capped buffer), a guarded `__import__` that returns read-only proxies holding exactly the names of
allowlist.py, the tools as functions, and the dspy shim whose predictor calls are RPCs to the host.

All of those objects are defined in cleanroom.py and built by executing its text in a namespace
without modules (see that file for why). This module only gathers the real primitives they need.

Standalone (stdlib + allowlist): the worker imports it as a top-level module.
"""

from __future__ import annotations

import builtins as _builtins
import importlib
import os
import re
import types
from typing import Any, Callable

try:  # imported as dspy_adaptive.sandbox.runtime (host, tests) or as top-level `runtime` (worker)
    from . import allowlist
except ImportError:  # pragma: no cover - exercised in the worker process
    import allowlist  # type: ignore[no-redef]

SANDBOX_MODULE = "specialist"
CLEANROOM_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cleanroom.py")

SAFE_BUILTIN_NAMES = (
    "abs", "all", "any", "ascii", "bin", "bool", "bytes", "callable", "chr", "classmethod",
    "complex", "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "hash",
    "hex", "id", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min",
    "next", "object", "oct", "ord", "pow", "property", "range", "repr", "reversed", "round", "set",
    "slice", "sorted", "staticmethod", "str", "sum", "super", "tuple", "zip", "bytearray",
    "__build_class__", "None", "True", "False", "Ellipsis", "NotImplemented",
)


def _safe_builtins() -> dict[str, Any]:
    b = {n: getattr(_builtins, n) for n in SAFE_BUILTIN_NAMES}
    for n in dir(_builtins):
        v = getattr(_builtins, n)
        if isinstance(v, type) and issubclass(v, BaseException):
            b[n] = v
    return b


_SAFE_BUILTINS = _safe_builtins()
_TYPE_NAME = re.compile(r"^[A-Za-z][\w\[\], .|'\"-]*$")


def _type_name_ok(text: str) -> bool:
    return len(text) <= 200 and _TYPE_NAME.match(text) is not None


def module_namespaces() -> dict[str, dict[str, Any]]:
    """{module: {allowed name: object}} for the allow-listed modules (names this Python lacks are skipped)."""
    out = {}
    for name in allowlist.ALLOWED_MODULES:
        mod = importlib.import_module(name)
        out[name] = {n: getattr(mod, n) for n in sorted(allowlist.ALLOWED_NAMES[name]) if hasattr(mod, n)}
    return out


_CLEANROOM: dict[str, Any] = {}
_NAMESPACES: dict[str, dict[str, Any]] = {}


def load_cleanroom() -> Callable[..., dict]:
    """cleanroom.build, executed in a namespace holding only the safe builtins (done once per process;
    the zygote does it before forking, so workers inherit it)."""
    if not _CLEANROOM:
        with open(CLEANROOM_PATH, encoding="utf-8") as f:
            code = compile(f.read(), CLEANROOM_PATH, "exec", dont_inherit=True)
        ns: dict[str, Any] = {"__builtins__": dict(_SAFE_BUILTINS), "__name__": "sandbox"}
        exec(code, ns)
        _CLEANROOM["build"] = ns["build"]
    if not _NAMESPACES:
        _NAMESPACES.update(module_namespaces())
    return _CLEANROOM["build"]


def request_globals(*, rpc: Callable[[dict], tuple[Any, Any]], tool_names: tuple[str, ...], stdout_cap: int,
                    max_predictor_calls: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(restricted globals, internals) for one request. `rpc(payload) -> (ok, value)` reaches the host."""
    built = load_cleanroom()(
        getattr, type, types.ModuleType, _NAMESPACES, allowlist.INTERNAL_IMPORTS, allowlist.DENIED_ATTRIBUTES,
        rpc, tuple(tool_names), int(stdout_cap), int(max_predictor_calls), _type_name_ok)
    b = dict(_SAFE_BUILTINS)
    b["type"] = built["type"]
    b["hasattr"] = built["hasattr"]
    b["hash"] = built["hash"]
    b["__import__"] = built["import"]
    g = {
        "__builtins__": b,
        "__name__": SANDBOX_MODULE,
        "__metaclass__": type,    # RestrictedPython compiles `class X:` as `class X(metaclass=__metaclass__)`
        "_getattr_": built["getattr"],
        "_getitem_": built["getitem"],
        "_getiter_": built["getiter"],
        "_iter_unpack_sequence_": built["iter_unpack_sequence"],
        "_unpack_sequence_": built["unpack_sequence"],
        "_write_": built["write"],
        "_inplacevar_": built["inplacevar"],
        "_apply_": built["apply"],
        "_print_": built["print"],
        "dspy": built["dspy"],
    }
    g.update(built["tools"])
    return g, built
