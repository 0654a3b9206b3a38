"""Host-side compile: policy check + RestrictedPython compile + structure check. Pure, cached.

The RestrictedPython code object is compiled once here and shipped to each worker marshalled, so a
worker does not recompile every source it meets (~0.25 ms each, times every worker).

`compile_program(source)` -> CompileResult. ok=False means "does not compile": the router
resolves to the fallback and the reasons are shown to reflection. The structure rule is: exactly
one top-level class inheriting from `dspy.Module` (or `Module` imported from dspy), and that
class defines `forward`. Other helper classes (e.g. `dspy.Signature` subclasses) are allowed.
"""

from __future__ import annotations

import ast
import hashlib
import marshal
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from . import policy


@dataclass(frozen=True)
class CompiledProgram:
    source: str
    class_name: str
    source_hash: str
    code: bytes = field(default=b"", repr=False)   # marshalled RestrictedPython code, sent to workers


@dataclass(frozen=True)
class CompileResult:
    ok: bool
    reasons: tuple[str, ...]
    program: CompiledProgram | None


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def _module_aliases(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Names bound to the dspy shim and to dspy.Module at top level."""
    dspy_names, module_names = {"dspy"}, set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "dspy":
                    dspy_names.add(a.asname or "dspy")
        elif isinstance(node, ast.ImportFrom) and node.module == "dspy":
            for a in node.names:
                if a.name == "Module":
                    module_names.add(a.asname or "Module")
    return dspy_names, module_names


def _structure(source: str) -> tuple[list[str], str | None]:
    tree = ast.parse(source)
    dspy_names, module_names = _module_aliases(tree)

    def is_module_base(b: ast.expr) -> bool:
        if isinstance(b, ast.Attribute) and b.attr == "Module" and isinstance(b.value, ast.Name):
            return b.value.id in dspy_names
        return isinstance(b, ast.Name) and b.id in module_names

    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and any(is_module_base(b) for b in n.bases)]
    if not classes:
        return ["line 0: no dspy.Module subclass found (define exactly one top-level class "
                "inheriting from dspy.Module, with a forward method)"], None
    if len(classes) > 1:
        names = ", ".join(f"{c.name} (line {c.lineno})" for c in classes)
        return [f"line {classes[1].lineno}: found {len(classes)} dspy.Module subclasses ({names}); "
                "define exactly one"], None
    cls = classes[0]
    if not any(isinstance(n, ast.FunctionDef) and n.name == "forward" for n in cls.body):
        return [f"line {cls.lineno}: class {cls.name!r} has no forward method"], None
    return [], cls.name


_CACHE: "OrderedDict[str, CompileResult]" = OrderedDict()
_CACHE_MAX = 4096
_LOCK = threading.Lock()


def compile_program(source: str) -> CompileResult:
    """Policy + RestrictedPython compile + structure. Nothing runs. Cached by source hash. Never raises:
    anything that goes wrong while checking is a rejection with a reason. The checks run on a fresh
    thread's stack, so whether a deeply nested source is accepted does not depend on how deep the
    caller's stack happens to be."""
    if not isinstance(source, str):
        return CompileResult(False, (f"line 0: source must be a str, got {type(source).__name__}",), None)
    h = source_hash(source)
    with _LOCK:
        hit = _CACHE.get(h)
        if hit is not None:
            _CACHE.move_to_end(h)
            return hit
    result = _on_fresh_stack(lambda: _compile(source, h))
    with _LOCK:
        _CACHE[h] = result
        while len(_CACHE) > _CACHE_MAX:
            _CACHE.popitem(last=False)
    return result


_VERIFIED: "OrderedDict[int, CompiledProgram]" = OrderedDict()   # id -> a program found compiled (kept alive)


def _compile(source: str, h: str) -> CompileResult:
    reasons, code = policy.check_and_compile(source)
    if reasons:
        return CompileResult(False, tuple(reasons), None)
    struct_reasons, class_name = _structure(source)
    if struct_reasons:
        return CompileResult(False, tuple(struct_reasons), None)
    return CompileResult(True, (), CompiledProgram(source, class_name, h, marshal.dumps(code)))


def _on_fresh_stack(fn) -> CompileResult:
    box: dict = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except Exception as e:  # noqa: BLE001 - a check that fails unexpectedly rejects the source
            box["error"] = e

    t = threading.Thread(target=target, name="sandbox-compile")
    t.start()
    t.join()
    if "result" in box:
        return box["result"]
    e = box.get("error")
    return CompileResult(False, (f"line 0: the source could not be checked ({type(e).__name__})",), None)


def is_compiled(program: CompiledProgram) -> bool:
    """True iff `program` is exactly what compile_program produces for its source (remembered per object:
    a CompiledProgram is immutable)."""
    if not isinstance(program, CompiledProgram):
        return False
    with _LOCK:
        if _VERIFIED.get(id(program)) is program:
            return True
    res = compile_program(program.source)
    ok = res.ok and res.program == program
    if ok:
        with _LOCK:
            _VERIFIED[id(program)] = program
            while len(_VERIFIED) > _CACHE_MAX:
                _VERIFIED.popitem(last=False)
    return ok
