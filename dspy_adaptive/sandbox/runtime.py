"""In-worker runtime: RestrictedPython guards, safe builtins, read-only module proxies, dspy shim.

Everything a specialist can touch is built here, inside the worker process:

* `make_globals(...)` builds a FRESH namespace per call: safe builtins (no open/exec/eval/
  getattr/...; `type` limited to one argument and never returning a metaclass; `hasattr` guarded),
  RestrictedPython guard hooks (`_getattr_`, `_getitem_`, `_getiter_`, `_write_`, `_inplacevar_`,
  `_apply_`, unpack guards, `_print_` writing to a capped buffer), a guarded `__import__` that
  only returns read-only proxies of allow-listed modules, the tools as global functions, and a
  per-call `dspy` shim. Because the shim classes are recreated per call and module proxies are
  read-only, no state can leak from one call/example to the next.
* `make_dspy(ctx)` builds the shim (Module, Predict, ChainOfThought, Prediction, Signature,
  InputField, OutputField, HostError). Predictor calls go to `ctx.predict(...)`, which is an RPC
  to the host (see worker.py); the host runs `bridge.predict` in the calling thread.

Standalone (stdlib + RestrictedPython + policy): imported by the worker as a top-level module.
"""

from __future__ import annotations

import builtins as _builtins
import importlib
import operator
import re
import types
from typing import Any, Callable

from RestrictedPython.Guards import guarded_iter_unpack_sequence, guarded_unpack_sequence

try:  # imported as dspy_adaptive.sandbox.runtime (host, tests) or as top-level `runtime` (worker)
    from . import policy
except ImportError:  # pragma: no cover - exercised in the worker process
    import policy  # type: ignore[no-redef]

SANDBOX_MODULE = "specialist"


# ---------------------------------------------------------------------------------------------
# read-only module proxies
# ---------------------------------------------------------------------------------------------
class ModuleProxy:
    """Read-only view of a module's public, non-module attributes (minus denied names)."""

    __slots__ = ("_proxy_name", "_proxy_ns")

    def __init__(self, name: str, ns: dict):
        object.__setattr__(self, "_proxy_name", name)
        object.__setattr__(self, "_proxy_ns", ns)

    def __getattr__(self, attr: str):
        if attr.startswith("_"):
            raise AttributeError(f"module {self._proxy_name!r} has no attribute {attr!r}")
        try:
            return self._proxy_ns[attr]
        except KeyError:
            raise AttributeError(f"module {self._proxy_name!r} has no attribute {attr!r}") from None

    def __setattr__(self, attr, value):
        raise AttributeError(f"module {self._proxy_name!r} is read-only in a specialist")

    def __delattr__(self, attr):
        raise AttributeError(f"module {self._proxy_name!r} is read-only in a specialist")

    def __repr__(self) -> str:
        return f"<module {self._proxy_name!r} (sandboxed)>"


def _module_namespace(mod: types.ModuleType) -> dict:
    denied = policy.DENIED_MODULE_NAMES.get(mod.__name__, set()) | policy.DENIED_ATTRIBUTES
    ns = {}
    for k in dir(mod):
        if k.startswith("_") or k in denied:
            continue
        v = getattr(mod, k)
        if isinstance(v, types.ModuleType):
            continue
        ns[k] = v
    return ns


_PROXIES: dict[str, ModuleProxy] = {}


def module_proxies() -> dict[str, ModuleProxy]:
    """Proxies of the allow-listed modules (built once per worker; they are immutable)."""
    if not _PROXIES:
        for name in policy.ALLOWED_MODULES:
            _PROXIES[name] = ModuleProxy(name, _module_namespace(importlib.import_module(name)))
    return _PROXIES


# ---------------------------------------------------------------------------------------------
# guards
# ---------------------------------------------------------------------------------------------
def guarded_getattr(obj, name, *default):
    if not isinstance(name, str):
        raise TypeError("attribute name must be a string")
    if name.startswith("_"):
        if not (name == "__init__" and isinstance(obj, super)):
            raise AttributeError(f"access to attribute {name!r} is not allowed in a specialist")
    elif name in policy.DENIED_ATTRIBUTES:
        raise AttributeError(f"access to attribute {name!r} is not allowed in a specialist")
    value = getattr(obj, name, *default)
    if isinstance(value, types.ModuleType):
        raise AttributeError(f"access to module attribute {name!r} is not allowed in a specialist")
    return value


def guarded_hasattr(obj, name) -> bool:
    try:
        guarded_getattr(obj, name)
    except AttributeError:
        return False
    return True


def guarded_getitem(obj, key):
    return obj[key]


_INPLACE = {
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "<<=": operator.ilshift,
    ">>=": operator.irshift, "&=": operator.iand, "^=": operator.ixor, "|=": operator.ior,
    "@=": operator.imatmul,
}


def inplacevar(op: str, x, y):
    return _INPLACE[op](x, y)


def apply(f, *args, **kwargs):
    return f(*args, **kwargs)


def safe_type(obj):
    """`type(x)` with one argument; never hands out a metaclass (so no 3-arg class building)."""
    t = type(obj)
    if issubclass(t, type):
        raise TypeError("type() of a class is not available in a specialist")
    return t


class CappedPrinter:
    """Target of RestrictedPython's print transform; keeps at most `cap` characters."""

    def __init__(self, cap: int):
        self.cap = cap
        self.parts: list[str] = []
        self.size = 0
        self.truncated = False

    def write(self, text: str) -> None:
        if self.size >= self.cap:
            self.truncated = True
            return
        room = self.cap - self.size
        if len(text) > room:
            text, self.truncated = text[:room], True
        self.parts.append(text)
        self.size += len(text)

    def _call_print(self, *objects, sep=" ", end="\n", file=None, flush=False):
        sep = " " if sep is None else str(sep)
        end = "\n" if end is None else str(end)
        self.write(sep.join(str(o) for o in objects) + end)

    def __call__(self, _getattr_=None):  # `printed` -> _print()
        return self.text()

    def text(self) -> str:
        s = "".join(self.parts)
        return s + "\n[... output truncated]" if self.truncated else s


def make_write_guard(shim_prediction: type) -> Callable[[Any], Any]:
    """`_write_(obj)`: attribute/item writes allowed only on containers, Predictions and objects
    of classes defined by the specialist itself (never on modules, shim classes, builtins)."""
    import collections

    writable = (dict, list, set, bytearray, collections.deque, shim_prediction)

    def guarded_write(obj):
        if isinstance(obj, writable):
            return obj
        cls = obj if isinstance(obj, type) else type(obj)
        if type.__getattribute__(cls, "__module__") == SANDBOX_MODULE:
            return obj
        raise TypeError(f"cannot modify {type(obj).__name__} objects in a specialist")

    return guarded_write


SAFE_BUILTIN_NAMES = (
    "abs", "all", "any", "ascii", "bin", "bool", "bytes", "callable", "chr", "classmethod",
    "complex", "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "hash",
    "hex", "id", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min",
    "next", "object", "oct", "ord", "pow", "property", "range", "repr", "reversed", "round", "set",
    "slice", "sorted", "staticmethod", "str", "sum", "super", "tuple", "zip", "bytearray",
    "__build_class__", "None", "True", "False", "Ellipsis", "NotImplemented",
)


def _base_builtins() -> dict:
    b = {n: getattr(_builtins, n) for n in SAFE_BUILTIN_NAMES}
    for n in dir(_builtins):
        v = getattr(_builtins, n)
        if isinstance(v, type) and issubclass(v, BaseException):
            b[n] = v
    b["type"] = safe_type
    b["hasattr"] = guarded_hasattr
    return b


_BASE_BUILTINS = _base_builtins()


# ---------------------------------------------------------------------------------------------
# dspy shim
# ---------------------------------------------------------------------------------------------
_TYPE_NAME = re.compile(r"^[A-Za-z_][\w\[\], .|]*$")


def _type_str(ann) -> str | None:
    if ann is None or ann is str or ann == "str":
        return None
    if isinstance(ann, str):
        return ann if _TYPE_NAME.match(ann) else None
    if isinstance(ann, type) and not getattr(ann, "__args__", None):
        return ann.__name__
    s = repr(ann).replace("typing.", "")
    return s if _TYPE_NAME.match(s) else None


def make_dspy(ctx) -> tuple[ModuleProxy, dict]:
    """Build a fresh dspy shim bound to `ctx` (which implements .predict(pred, kwargs))."""

    class HostError(RuntimeError):
        """A host-side predictor/tool call failed (message carries the host exception)."""

    class PredictorLimitError(RuntimeError):
        """max_predictor_calls exceeded for this run."""

    class Prediction:
        def __init__(self, *args, **kwargs):
            store = dict(*args, **kwargs) if args else dict(kwargs)
            object.__setattr__(self, "_store", store)

        def __getattr__(self, name):
            if name.startswith("_"):
                raise AttributeError(name)
            try:
                return self._store[name]
            except KeyError:
                raise AttributeError(f"Prediction has no field {name!r}") from None

        def __setattr__(self, name, value):
            if name.startswith("_"):
                raise AttributeError(f"cannot set {name!r} on a Prediction")
            self._store[name] = value

        def __getitem__(self, key):
            return self._store[key]

        def __contains__(self, key):
            return key in self._store

        def __len__(self):
            return len(self._store)

        def __iter__(self):
            return iter(self._store)

        def keys(self):
            return list(self._store.keys())

        def values(self):
            return list(self._store.values())

        def items(self):
            return list(self._store.items())

        def get(self, key, default=None):
            return self._store.get(key, default)

        def toDict(self):  # noqa: N802 (dspy API)
            return dict(self._store)

        def __repr__(self):
            return "Prediction(" + ", ".join(f"{k}={v!r}" for k, v in self._store.items()) + ")"

    class Field:
        def __init__(self, io: str, desc=None, prefix=None, **_ignored):
            self.io, self.desc, self.prefix = io, desc, prefix

    def InputField(*, desc=None, prefix=None, **kw):  # noqa: N802 (dspy API)
        return Field("input", desc=desc, prefix=prefix)

    def OutputField(*, desc=None, prefix=None, **kw):  # noqa: N802 (dspy API)
        return Field("output", desc=desc, prefix=prefix)

    class Signature:
        """`class QA(dspy.Signature)` with InputField/OutputField, or `dspy.Signature("a -> b", "instr")`."""

        def __init__(self, spec: str, instructions: str | None = None):
            if not isinstance(spec, str) or "->" not in spec:
                raise ValueError(f"invalid signature {spec!r}: expected 'inputs -> outputs'")
            self.spec, self.instructions = spec.strip(), instructions

        def with_instructions(self, instructions: str):
            return Signature(self.spec, instructions)

    def lower(sig) -> tuple[str, str | None]:
        """Lower a string/instance/class signature to (string signature, instructions)."""
        if isinstance(sig, str):
            if "->" not in sig:
                raise ValueError(f"invalid signature {sig!r}: expected 'inputs -> outputs'")
            return sig.strip(), None
        if isinstance(sig, Signature):
            return sig.spec, sig.instructions
        if isinstance(sig, type) and issubclass(sig, Signature) and sig is not Signature:
            ann, fields = {}, {}
            for klass in reversed(sig.__mro__):
                ann.update(klass.__dict__.get("__annotations__", {}))
                fields.update({k: v for k, v in klass.__dict__.items() if isinstance(v, Field)})
            order = [k for k in ann if k in fields] + [k for k in fields if k not in ann]
            parts = {"input": [], "output": []}
            descs = []
            for k in order:
                t = _type_str(ann.get(k))
                parts[fields[k].io].append(f"{k}: {t}" if t else k)
                if fields[k].desc:
                    descs.append(f"- {k}: {fields[k].desc}")
            if not parts["output"]:
                raise ValueError(f"signature class {sig.__name__} has no OutputField")
            spec = f"{', '.join(parts['input'])} -> {', '.join(parts['output'])}"
            doc = (sig.__doc__ or "").strip() or None
            if descs:
                doc = ((doc + "\n\n") if doc else "") + "Fields:\n" + "\n".join(descs)
            return spec, doc
        raise TypeError(f"signature must be a string or a dspy.Signature, got {type(sig).__name__}")

    class Predict:
        KIND = "Predict"

        def __init__(self, signature, instructions=None, **config):
            spec, doc = lower(signature)
            object.__setattr__(self, "_spec", spec)
            object.__setattr__(self, "_instructions", instructions if instructions is not None else doc)
            object.__setattr__(self, "_pname", None)

        @property
        def signature(self):
            return self._spec

        @property
        def instructions(self):
            return self._instructions

        def __call__(self, *args, **kwargs):
            if args:
                raise TypeError(f"{self.KIND} takes keyword arguments only (got {len(args)} positional)")
            return self.forward(**kwargs)

        def forward(self, **kwargs):
            return ctx.predict(self, kwargs)

        def __repr__(self):
            return f"{self.KIND}({self._spec!r})"

    class ChainOfThought(Predict):
        KIND = "ChainOfThought"

    class Module:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, *args, **kwargs):
            return self.forward(*args, **kwargs)

        def named_predictors(self):
            return named_predictors(self)

        def predictors(self):
            return [p for _, p in named_predictors(self)]

    def named_predictors(root) -> list[tuple[str, Predict]]:
        out, seen = [], set()

        def walk(obj, path, depth):
            if depth > 8 or id(obj) in seen:
                return
            if isinstance(obj, Predict):
                seen.add(id(obj))
                out.append((path, obj))
            elif isinstance(obj, Module):
                seen.add(id(obj))
                for k, v in list(vars(obj).items()):
                    if not k.startswith("_"):
                        walk(v, f"{path}.{k}" if path else k, depth + 1)
            elif isinstance(obj, (list, tuple)):
                for i, v in enumerate(obj):
                    walk(v, f"{path}[{i}]", depth + 1)
            elif isinstance(obj, dict):
                for k, v in list(obj.items()):
                    walk(v, f"{path}[{k!r}]", depth + 1)

        walk(root, "", 0)
        return out

    ns = dict(Module=Module, Predict=Predict, ChainOfThought=ChainOfThought, Prediction=Prediction,
              Signature=Signature, InputField=InputField, OutputField=OutputField,
              HostError=HostError, PredictorLimitError=PredictorLimitError)
    internals = dict(ns, named_predictors=named_predictors, lower=lower)
    return ModuleProxy("dspy", ns), internals


def make_globals(*, printer: CappedPrinter, dspy_proxy: ModuleProxy, shim: dict,
                 tools: dict[str, Callable]) -> dict:
    """Fresh restricted globals for one call."""
    proxies = module_proxies()

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level:
            raise ImportError("relative imports are not allowed in a specialist")
        if name == "dspy":
            return dspy_proxy
        if name in proxies:
            return proxies[name]
        raise ImportError(f"import of {name!r} is not allowed in a specialist")

    b = dict(_BASE_BUILTINS)
    b["__import__"] = guarded_import
    g = {
        "__builtins__": b,
        "__name__": SANDBOX_MODULE,
        "__metaclass__": type,
        "_getattr_": guarded_getattr,
        "_getitem_": guarded_getitem,
        "_getiter_": iter,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_write_": make_write_guard(shim["Prediction"]),
        "_inplacevar_": inplacevar,
        "_apply_": apply,
        "_print_": lambda _getattr_=None: printer,
        "dspy": dspy_proxy,
    }
    g.update(tools)
    return g
