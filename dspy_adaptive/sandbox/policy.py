"""Static policy for specialist sources: nothing runs here.

`check(source)` returns one human-readable reason per violation ("line 3: ..."), or [] if the
source is allowed. Two passes, both over the AST only:

1. Our own AST pass (hand-written, because RestrictedPython has no notion of an import
   allow-list, of forbidden builtins such as `open`/`getattr`/`vars`, of decorator or class-keyword
   policy, of `type()` with 3 args, or of attributes like `.format` that reach attributes through
   format strings; it also gives clearer, specific reasons for reflection to read).
2. RestrictedPython's `RestrictingNodeTransformer` (subclassed as `SpecialistTransformer` to admit
   exactly the `super().__init__(...)` pattern the dspy.Module format needs). Its errors are added
   for lines our pass did not already flag, so it acts as a second, independent net
   (unknown/new AST nodes, async, underscore names, inspect attributes, ...). The subclass also
   admits `name: T = value` (AnnAssign to a plain name), needed for class-based dspy.Signature
   fields; the annotation and value expressions are still visited (and guarded) as usual.

This module is standalone (stdlib + RestrictedPython only): the worker subprocess imports it as a
top-level module to compile with the same transformer, so it must not use package-relative imports.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import unicodedata

from RestrictedPython.transformer import ALLOWED_FUNC_NAMES, INSPECT_ATTRIBUTES, RestrictingNodeTransformer

try:  # imported as dspy_adaptive.sandbox.policy (host) or as top-level `policy` (worker)
    from . import allowlist
except ImportError:  # pragma: no cover - exercised in the worker process
    import allowlist  # type: ignore[no-redef]

FILENAME = allowlist.FILENAME

#: Modules a specialist may import (besides `dspy`, which binds the in-sandbox shim), and the names it
#: may use from each: the one allow-list (allowlist.py).
ALLOWED_MODULES = allowlist.ALLOWED_MODULES
ALLOWED_NAMES = allowlist.ALLOWED_NAMES

#: Characters that make the code a person reads differ from the code that runs ("Trojan Source",
#: CVE-2021-42574): bidirectional overrides/isolates and invisible format characters. Refused anywhere
#: in the source, strings and comments included; so are control characters other than tab and newline,
#: and every other format, line/paragraph-separator or surrogate code point (`HIDDEN_CATEGORIES`, the
#: categories `dspy_adaptive.escaping` writes visibly: tag characters, U+2028, interlinear annotations,
#: ...), so an exported program reads as it runs. (Self-contained: the worker imports this module alone.)
_HIDDEN = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff\u00ad\u061c\u180e"
                     "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")

#: Builtins that are rejected wherever the name appears (load or store).
FORBIDDEN_NAMES = frozenset({
    "open", "exec", "eval", "compile", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "breakpoint", "input", "memoryview", "help", "dir", "exit", "quit", "copyright",
    "credits", "license", "builtins", "printed",
})

#: Attribute names rejected statically and at run time (besides anything starting with "_").
DENIED_ATTRIBUTES = allowlist.DENIED_ATTRIBUTES | frozenset(INSPECT_ATTRIBUTES)

#: The only decorators allowed (bare names).
ALLOWED_DECORATORS = frozenset({"staticmethod", "classmethod", "property"})

_RP_LINE = re.compile(r"^Line (\d+|None): ?(.*)$", re.S)


def _is_super_init(node: ast.Attribute) -> bool:
    """`super().__init__` with a zero-argument super() call."""
    v = node.value
    return (node.attr == "__init__" and isinstance(v, ast.Call) and isinstance(v.func, ast.Name)
            and v.func.id == "super" and not v.args and not v.keywords)


class SpecialistTransformer(RestrictingNodeTransformer):
    """RestrictedPython's transformer, admitting `super().__init__(...)` (needed by dspy.Module)."""

    def visit_Attribute(self, node):  # noqa: N802 (ast API)
        if isinstance(node.ctx, ast.Load) and _is_super_init(node):
            node = self.node_contents_visit(node)
            new = ast.Call(func=ast.Name("_getattr_", ast.Load()),
                           args=[node.value, ast.Constant(node.attr)], keywords=[])
            for n in (new, new.func, new.args[1]):
                ast.copy_location(n, node)
                n.end_lineno, n.end_col_offset = node.end_lineno, node.end_col_offset
            return new
        return super().visit_Attribute(node)

    def visit_AnnAssign(self, node):  # noqa: N802
        """Allow `name: T = value` (class-based dspy.Signature fields); other targets are rejected."""
        if not isinstance(node.target, ast.Name):
            self.error(node, "annotated assignment is only allowed to a simple name")
            return node
        return self.node_contents_visit(node)


def restricted_compile(source: str):
    """RestrictedPython transform + compile -> (code | None, errors tuple).

    Done by hand rather than via `compile_restricted_exec` because that helper compiles inside a
    module using `from __future__ import annotations` and ignores `dont_inherit`, which would turn
    every annotation of the specialist into a string.
    """
    try:
        tree = ast.parse(source, FILENAME, "exec")
    except SyntaxError as e:
        return None, (f"Line {e.lineno or 0}: syntax error: {e.msg}",)
    errors: list[str] = []
    SpecialistTransformer(errors, [], {}).visit(tree)
    if errors:
        return None, tuple(errors)
    try:
        return compile(tree, FILENAME, "exec", dont_inherit=True), ()
    except SyntaxError as e:  # compile-stage errors ast.parse does not catch ('return' outside function)
        return None, (f"Line {e.lineno or 0}: syntax error: {e.msg}",)


class _PolicyVisitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.reasons: list[tuple[int, str]] = []
        self._class_depth = 0
        self._module_aliases: dict[str, str] = {}   # local name -> allow-listed module it was bound to

    def flag(self, node: ast.AST, msg: str) -> None:
        self.reasons.append((getattr(node, "lineno", 0) or 0, msg))

    # ---- imports -------------------------------------------------------------------------------
    def _module_ok(self, node: ast.AST, name: str) -> bool:
        if name == "dspy" or name in ALLOWED_MODULES:
            return True
        self.flag(node, f"import of {name!r} is not allowed (allowed: {', '.join(ALLOWED_MODULES)}, dspy)")
        return False

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if self._module_ok(node, alias.name) and alias.name in ALLOWED_NAMES and "." not in alias.name:
                self._module_aliases[alias.asname or alias.name] = alias.name
            if alias.asname and alias.asname.startswith("_"):
                self.flag(node, f"import alias {alias.asname!r} is not allowed (names starting with '_' are reserved)")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag(node, "relative imports are not allowed")
            return
        mod = node.module or ""
        if not self._module_ok(node, mod):
            return
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, f"star import from {mod!r} is not allowed")
            elif alias.name.startswith("_"):
                self.flag(node, f"import of {mod}.{alias.name} is not allowed (names starting with '_' are reserved)")
            elif mod != "dspy" and not allowlist.allowed(mod, alias.name):
                self.flag(node, f"import of {mod}.{alias.name} is not allowed ({_names_hint(mod)})")
            if alias.asname and alias.asname.startswith("_"):
                self.flag(node, f"import alias {alias.asname!r} is not allowed (names starting with '_' are reserved)")

    # ---- names and attributes --------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_NAMES:
            self.flag(node, f"use of {node.id!r} is not allowed")
        elif node.id.startswith("_") and node.id != "_":
            self.flag(node, f"name {node.id!r} is not allowed (names starting with '_' are reserved)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("_") and node.attr != "_":
            if not (isinstance(node.ctx, ast.Load) and _is_super_init(node)):
                self.flag(node, f"attribute {node.attr!r} is not allowed (attributes starting with '_' "
                                "are reserved; only super().__init__() is permitted)")
        elif node.attr in DENIED_ATTRIBUTES:
            why = ("format strings can reach attributes; use f-strings"
                   if node.attr in ("format", "format_map", "vformat", "Formatter") else
                   "it exposes interpreter internals or evaluates code")
            self.flag(node, f"attribute {node.attr!r} is not allowed ({why})")
        elif isinstance(node.value, ast.Name) and node.value.id in self._module_aliases:
            mod = self._module_aliases[node.value.id]
            if not allowlist.allowed(mod, node.attr):
                self.flag(node, f"{mod}.{node.attr} is not allowed ({_names_hint(mod)})")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "type" and (len(node.args) != 1 or node.keywords):
            self.flag(node, "type() is only allowed with one argument (building classes with type() is not allowed)")
        self.generic_visit(node)

    # ---- definitions -----------------------------------------------------------------------------
    def _check_args(self, node, args: ast.arguments) -> None:
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None and a.arg.startswith("_") and a.arg != "_":
                self.flag(node, f"argument name {a.arg!r} is not allowed (names starting with '_' are reserved)")

    def _check_decorators(self, node) -> None:
        for d in node.decorator_list:
            if not (isinstance(d, ast.Name) and d.id in ALLOWED_DECORATORS):
                self.flag(d, f"decorator {ast.unparse(d)!r} is not allowed (allowed: "
                             f"{', '.join(sorted(ALLOWED_DECORATORS))})")

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._check_decorators(node)
        if node.name.startswith("_") and not (self._class_depth and node.name in ALLOWED_FUNC_NAMES):
            self.flag(node, f"function name {node.name!r} is not allowed (only methods "
                            f"{', '.join(sorted(ALLOWED_FUNC_NAMES))} may start with '_')")
        elif node.name in FORBIDDEN_NAMES:
            self.flag(node, f"function name {node.name!r} is not allowed")
        self._check_args(node, node.args)
        depth, self._class_depth = self._class_depth, 0
        self.generic_visit(node)
        self._class_depth = depth

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.flag(node, "async functions are not allowed")

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._check_args(node, node.args)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._check_decorators(node)
        if node.name.startswith("_"):
            self.flag(node, f"class name {node.name!r} is not allowed (names starting with '_' are reserved)")
        for kw in node.keywords:
            self.flag(node, f"class keyword {kw.arg or '**'!r} is not allowed (no metaclass= or class kwargs)")
        self._class_depth += 1
        self.generic_visit(node)
        self._class_depth -= 1

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.flag(node, "nonlocal is not allowed")

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name and node.name.startswith("_"):
            self.flag(node, f"name {node.name!r} is not allowed (names starting with '_' are reserved)")
        self.generic_visit(node)

    def visit_alias(self, node) -> None:  # handled in Import/ImportFrom
        return


def _names_hint(mod: str) -> str:
    names = sorted(ALLOWED_NAMES.get(mod, ()))
    shown = ", ".join(names[:25]) + (", ..." if len(names) > 25 else "")
    return f"allowed from {mod}: {shown}"


HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _first_hidden(line: str) -> str | None:
    if line.isprintable():
        return None
    return next((ch for ch in line if ch != "\t" and not ch.isprintable()
                 and unicodedata.category(ch) in HIDDEN_CATEGORIES), None)


def _hidden_characters(source: str) -> list[tuple[int, str]]:
    out = []
    for i, line in enumerate(source.split("\n"), 1):
        m = _HIDDEN.search(line.rstrip("\r"))
        ch = m.group() if m else _first_hidden(line.rstrip("\r"))
        if ch:
            out.append((i, f"the source contains the invisible or control character U+{ord(ch):04X}; "
                           "it can make the code people read differ from the code that runs"))
    return out


def _non_ascii_identifiers(source: str) -> list[tuple[int, str]]:
    """Identifiers must be ASCII: Python folds look-alike letters (NFKC) into other names, so 'ｅｖａｌ' is
    'eval' when it runs. Strings and comments may hold any text."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.NAME and not tok.string.isascii():
                out.append((tok.start[0], f"identifier {tok.string!r} is not ASCII (look-alike letters are "
                                          "folded into other names when the code runs)"))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass   # ast.parse reports the syntax error
    return out


def _fmt(reasons: list[tuple[int, str]]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for line, msg in sorted(reasons, key=lambda r: r[0]):
        s = f"line {line}: {msg}"
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def check(source: str) -> list[str]:
    """Static policy: [] if allowed, else one "line N: ..." reason per violation. Nothing runs."""
    return check_and_compile(source)[0]


#: How deeply the source's syntax tree may nest (expressions, statements, ...). Real programs stay far
#: below; the limit makes deep nesting a clear rejection instead of a RecursionError in a visitor.
MAX_NESTING = 200


def _nesting(tree: ast.AST, limit: int) -> int:
    """The depth of `tree` (iteratively, so any depth is measured), stopping once past `limit`."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def check_and_compile(source: str):
    """(reasons, code): `check`'s reasons, and the RestrictedPython code object when there are none
    (else None). The host compiles each source once here; workers receive this code object. Every
    failure is a rejection with a reason, never an exception (deep nesting included)."""
    if not isinstance(source, str):
        return [f"line 0: source must be a str, got {type(source).__name__}"], None
    try:
        return _check_and_compile(source)
    except (RecursionError, MemoryError) as e:
        return [f"line 0: the source nests too deeply to be checked ({type(e).__name__}); at most "
                f"{MAX_NESTING} levels are allowed"], None


def _check_and_compile(source: str):
    try:
        tree = ast.parse(source, filename=FILENAME)
    except SyntaxError as e:
        return [f"line {e.lineno or 0}: syntax error: {e.msg}"], None
    except ValueError as e:  # null bytes
        return [f"line 0: source cannot be parsed: {type(e).__name__}: {e}"], None
    except (RecursionError, MemoryError) as e:  # absurd nesting: Python's parser gives up
        return [f"line 0: the source nests too deeply to be parsed ({type(e).__name__}); at most {MAX_NESTING} "
                "levels are allowed"], None
    depth = _nesting(tree, MAX_NESTING)
    if depth > MAX_NESTING:
        return [f"line 0: the source nests more than {MAX_NESTING} levels deep (expressions and statements "
                "inside one another); split it into smaller steps"], None
    v = _PolicyVisitor()
    v.reasons.extend(_hidden_characters(source))
    v.reasons.extend(_non_ascii_identifiers(source))
    v.visit(tree)
    flagged_lines = {line for line, _ in v.reasons}
    try:
        code, rp_errors = restricted_compile(source)
    except (RecursionError, MemoryError, ValueError) as e:
        code, rp_errors = None, (f"Line 0: RestrictedPython could not compile the source ({type(e).__name__})",)
    for err in rp_errors:
        m = _RP_LINE.match(err)
        line = int(m.group(1)) if m and m.group(1) != "None" else 0
        msg = (m.group(2) if m else err).strip()
        if line not in flagged_lines:
            v.reasons.append((line, msg if msg.startswith("syntax error") else f"{msg} (RestrictedPython)"))
    reasons = _fmt(v.reasons)
    return reasons, (code if not reasons else None)
