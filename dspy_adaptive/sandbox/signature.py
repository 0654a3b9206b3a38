"""The strict signature grammar of the host bridge: a sandboxed program's `dspy.Predict("q -> a")`
reaches the host as text, and the host must build a real `dspy.Signature` from it WITHOUT handing
that text to DSPy.

Why our own grammar: DSPy's string signatures resolve a field's type by looking names up in the
caller's stack frames and importing modules (`dspy.Signature("q: os.environ -> a")` hands out the
host's environment; `"q: row.example -> a"` read the gold label of the row being scored). Here a
type is one of a handful of plain types or one of DSPy's own types from a fixed list of names
(`dspy_types.DSPY_TYPE_NAMES`: Image, Audio, File, History, Code, ToolCalls, Reasoning; the only dotted
spelling is that list's `dspy.` prefix) -- no calls, no other attribute chains, no evaluation of any
kind -- and the host builds the Signature from the parsed fields (`bridge.host_signature`). Values of
DSPy's types cross the bridge as plain data (`dspy_types.serialize` / `deserialize`).

    signature := [fields] "->" fields
    fields    := field ("," field)*
    field     := NAME [":" type]
    type      := atom ("|" atom)*                       # a union; "T | None" is Optional[T]
    atom      := "str" | "int" | "float" | "bool" | "Any" | "None"
               | ("list" | "List") ["[" type "]"]
               | ("dict" | "Dict") ["[" "str" "," type "]"]
               | "Optional" "[" type "]"
               | "Literal" "[" literal ("," literal)* "]"
               | ["dspy" "."] DSPYTYPE                  # Image | Audio | File | History | Code | ToolCalls
               | ["dspy" "."] "Code" "[" language "]"    #   | Reasoning; canonical text "dspy.Image"
    literal   := a quoted string without quotes, backslashes or newlines (<= 100 chars) | an integer
    language  := a quoted name of 1-20 letters, digits and +#._- ("python", 'c++')

NAME is an ASCII identifier that does not start with "_" (at most 64 characters), is not a Python
keyword and does not shadow an attribute of dspy.Signature. Nesting is at most 4 deep. Pure: nothing but
the stdlib and, for DSPy's types, their classes (`dspy_types`).
"""

from __future__ import annotations

import keyword
import re
import typing
from dataclasses import dataclass
from typing import Any

from dspy_adaptive.sandbox.dspy_types import CODE_LANGUAGE, DSPY_TYPE_NAMES, dspy_type, is_dspy_type

MAX_SIGNATURE_CHARS = 4000
MAX_FIELDS = 24
MAX_DEPTH = 4
MAX_LITERALS = 32

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}\Z")

#: Public attributes of dspy.Signature / pydantic.BaseModel: a field with one of these names would
#: shadow it (pydantic refuses or silently breaks the class).
RESERVED = frozenset({
    "append", "append_instructions", "construct", "copy", "delete", "dict", "dump_state", "equals",
    "fields", "from_orm", "input_fields", "insert", "instructions", "json", "load_state",
    "model_computed_fields", "model_config", "model_construct", "model_copy", "model_dump",
    "model_dump_json", "model_extra", "model_fields", "model_fields_set", "model_json_schema",
    "model_parametrized_name", "model_post_init", "model_rebuild", "model_validate",
    "model_validate_json", "model_validate_strings", "output_fields", "parse_file", "parse_obj",
    "parse_raw", "prepend", "schema", "schema_json", "signature", "update_forward_refs", "validate",
    "with_instructions", "with_updated_fields",
}) | frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)

# typing caches Literal[...] and Union[...] objects by their arguments (an LRU shared by the whole process), so a
# signature built with them would leave host state a later request could time: a Literal of request A's strings
# comes back faster for request B. The grammar builds both with typing's own functions, past the cache (where this
# Python has them; otherwise the cached forms).
_LITERAL = getattr(getattr(typing.Literal, "_getitem", None), "__wrapped__", None)
_UNION = getattr(getattr(typing, "_SpecialForm", None) and typing._SpecialForm.__getitem__, "__wrapped__", None)


def fresh_literal(values: tuple) -> Any:
    """`typing.Literal[values]`, built afresh (equal to the cached one, never taken from or put in a cache)."""
    return _LITERAL(typing.Literal, *values) if _LITERAL is not None else typing.Literal[values]


def fresh_union(types: tuple) -> Any:
    """`typing.Union[types]` (`Optional[T]` is `(T, None)`), built afresh like `fresh_literal`."""
    return _UNION(typing.Union, types) if _UNION is not None else typing.Union[types]  # noqa: UP007


_SIMPLE = {"str": str, "int": int, "float": float, "bool": bool, "Any": typing.Any, "None": type(None)}
_TOKEN = re.compile(r"""\s*(?:(?P<arrow>->)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<int>-?[0-9]{1,18})
                       |(?P<str>'[^'"\\\n]{0,100}'|"[^'"\\\n]{0,100}")|(?P<punct>[\[\],:|.]))""", re.X)


class SignatureError(ValueError):
    """The text is not a signature of the strict grammar. The message is safe to show the sandbox."""


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: Any          # a real Python type / typing form built by the parser, never from the text
    type_text: str     # canonical spelling, e.g. "list[str]"


@dataclass(frozen=True)
class ParsedSignature:
    inputs: tuple[FieldSpec, ...]
    outputs: tuple[FieldSpec, ...]

    @property
    def text(self) -> str:
        """Canonical text ("a: str, b: int -> c: list[str]"): equal meaning <=> equal text."""
        def side(fs):
            return ", ".join(f"{f.name}: {f.type_text}" for f in fs)
        return f"{side(self.inputs)} -> {side(self.outputs)}"

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.outputs)


def _clip(text: str, n: int = 80) -> str:
    return text if len(text) <= n else text[:n] + "..."


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise SignatureError(f"unexpected text {_clip(text[pos:].lstrip(), 30)!r} at position {pos}; "
                                 "a signature is 'name, name: type -> name: type' with plain names and types")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str, reserved: frozenset[str] = frozenset()):
        self.text = text
        self.toks = _tokens(text)
        self.i = 0
        self.reserved = reserved

    def peek(self) -> tuple[str, str, int] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, value: str | None = None, kind: str | None = None) -> tuple[str, str, int]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value) or (kind is not None and tok[0] != kind):
            want = repr(value) if value else (kind or "more text")
            got = "the end" if tok is None else repr(tok[1])
            raise SignatureError(f"expected {want} but found {got} in signature {_clip(self.text)!r}")
        self.i += 1
        return tok

    def fields(self, stop: str | None) -> list[FieldSpec]:
        out: list[FieldSpec] = []
        while True:
            tok = self.peek()
            if tok is None or tok[1] == stop:
                return out
            out.append(self.field())
            tok = self.peek()
            if tok is not None and tok[1] == ",":
                self.take(",")
                continue
            return out

    def field(self) -> FieldSpec:
        _, name, _ = self.take(kind="name")
        if not NAME.match(name):
            raise SignatureError(f"field name {_clip(name, 40)!r} is not allowed (plain ASCII names that do not "
                                 "start with '_', at most 64 characters)")
        if name in RESERVED:
            raise SignatureError(f"field name {name!r} is reserved (a Python keyword or a dspy.Signature attribute)")
        if name in self.reserved:
            raise SignatureError(f"field name {name!r} is reserved: DSPy's predictors take {name!r} as an argument "
                                 "of their own; rename the field")
        tok = self.peek()
        if tok is not None and tok[1] == ":":
            self.take(":")
            typ, text = self.type(1)
        else:
            typ, text = str, "str"
        return FieldSpec(name, typ, text)

    def type(self, depth: int) -> tuple[Any, str]:
        if depth > MAX_DEPTH:
            raise SignatureError(f"types nest more than {MAX_DEPTH} deep in signature {_clip(self.text)!r}")
        parts = [self.atom(depth)]
        while (tok := self.peek()) is not None and tok[1] == "|":
            self.take("|")
            parts.append(self.atom(depth))
        if len(parts) == 1:
            return parts[0]
        types = tuple(p[0] for p in parts)
        return fresh_union(types), " | ".join(p[1] for p in parts)

    def atom(self, depth: int) -> tuple[Any, str]:
        kind, name, pos = self.take()
        if kind != "name":
            raise SignatureError(f"expected a type at position {pos} of signature {_clip(self.text)!r}")
        if name in _SIMPLE:
            return _SIMPLE[name], name
        if name == "dspy" and (tok := self.peek()) is not None and tok[1] == ".":
            self.take(".")
            _, name, pos = self.take(kind="name")
            if name not in DSPY_TYPE_NAMES:
                raise SignatureError(f"dspy.{_clip(name, 40)} is not one of DSPy's types a signature may name "
                                     f"({', '.join(DSPY_TYPE_NAMES)})")
        if name in DSPY_TYPE_NAMES:
            return self.dspy_atom(name)
        if name in ("list", "List"):
            if self._opens():
                inner, text = self.type(depth + 1)
                self.take("]")
                return list[inner], f"list[{text}]"
            return list, "list"
        if name in ("dict", "Dict"):
            if self._opens():
                self.take("str")
                self.take(",")
                inner, text = self.type(depth + 1)
                self.take("]")
                return dict[str, inner], f"dict[str, {text}]"
            return dict, "dict"
        if name == "Optional":
            self.take("[")
            inner, text = self.type(depth + 1)
            self.take("]")
            return fresh_union((inner, type(None))), f"Optional[{text}]"
        if name == "Literal":
            self.take("[")
            values = [self.literal()]
            while (tok := self.peek()) is not None and tok[1] == ",":
                self.take(",")
                values.append(self.literal())
            self.take("]")
            if len(values) > MAX_LITERALS:
                raise SignatureError(f"Literal[...] has more than {MAX_LITERALS} values")
            return fresh_literal(tuple(values)), "Literal[" + ", ".join(repr(v) for v in values) + "]"
        raise SignatureError(
            f"type {_clip(name, 40)!r} is not allowed in signature {_clip(self.text)!r} (allowed: str, int, float, "
            "bool, Any, list[T], dict[str, T], Optional[T], T | None, Literal['a', 'b'], and DSPy's "
            + ", ".join(f"dspy.{n}" for n in DSPY_TYPE_NAMES) + ")")

    def dspy_atom(self, name: str) -> tuple[Any, str]:
        if name == "Code" and self._opens():
            kind, value, pos = self.take()
            language = value[1:-1] if kind == "str" else ""
            if not CODE_LANGUAGE.match(language):
                raise SignatureError(f"dspy.Code[...] takes a quoted language name of 1-20 letters, digits and "
                                     f"+#._- (position {pos})")
            self.take("]")
            return dspy_type(name, language), f"dspy.Code[{language!r}]"
        return dspy_type(name), f"dspy.{name}"

    def _opens(self) -> bool:
        tok = self.peek()
        if tok is not None and tok[1] == "[":
            self.take("[")
            return True
        return False

    def literal(self) -> str | int:
        kind, value, pos = self.take()
        if kind == "str":
            return value[1:-1]
        if kind == "int":
            return int(value)
        raise SignatureError(f"Literal values are quoted strings or integers (position {pos})")


def parse_signature(text: Any, reserved: frozenset[str] = frozenset()) -> ParsedSignature:
    """Parse `text` with the strict grammar above, or raise SignatureError saying why. Nothing is evaluated.
    `reserved`: further names no field may take (the bridge passes DSPy's own predictor arguments)."""
    if not isinstance(text, str):
        raise SignatureError(f"a signature is text, got {type(text).__name__}")
    if len(text) > MAX_SIGNATURE_CHARS:
        raise SignatureError(f"signature is {len(text)} characters long (at most {MAX_SIGNATURE_CHARS})")
    if text.count("->") != 1:
        raise SignatureError(f"signature {_clip(text)!r} must contain exactly one '->'")
    p = _Parser(text, reserved)
    inputs = p.fields("->")
    p.take("->")
    outputs = p.fields(None)
    if p.peek() is not None:
        raise SignatureError(f"unexpected {p.peek()[1]!r} in signature {_clip(text)!r}")
    if not outputs:
        raise SignatureError(f"signature {_clip(text)!r} has no output field")
    names = [f.name for f in (*inputs, *outputs)]
    if len(names) > MAX_FIELDS:
        raise SignatureError(f"signature has {len(names)} fields (at most {MAX_FIELDS})")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SignatureError(f"field names must be distinct; repeated: {', '.join(dup[:5])}")
    return ParsedSignature(tuple(inputs), tuple(outputs))


# ------------------------------------------------------------------------------------------ values
#: Checks one request's values may cost the host (`conforms`): every node a check visits and every Literal
#: value it compares counts one. A specialist chooses both the types and the values, and a check's cost is
#: their product (a Union of lists of Literals against a long list fails each alternative on its last
#: element), so without a bound one 256 KB request held the host's CPU for seconds, past its deadline.
MAX_CHECK_STEPS = 200_000


class CheckTooCostly(ValueError):
    """Checking a value against its declared type would cost more than MAX_CHECK_STEPS."""


def check_budget() -> list[int]:
    """A fresh step budget for one request's `conforms` checks."""
    return [MAX_CHECK_STEPS]


def conforms(value: Any, typ: Any, budget: list[int] | None = None) -> bool:
    """Whether a plain JSON value fits a type this grammar builds (as DSPy's own input check reads it, with
    two allowances for JSON: an integer fits `float`, and a list of strings fits `str`, as DSPy accepts; a
    DSPy type's value is its plain data, which `dspy_types.deserialize` validates with DSPy's own validator).
    `budget` (`check_budget()`, shared by one request's checks) bounds the work: CheckTooCostly when spent."""
    return _conforms(value, typ, check_budget() if budget is None else budget)


def _spend(budget: list[int], steps: int) -> None:
    budget[0] -= steps
    if budget[0] < 0:
        raise CheckTooCostly(f"checking the values against their declared types would take more than "
                             f"{MAX_CHECK_STEPS} steps")


def _conforms(value: Any, typ: Any, budget: list[int]) -> bool:
    _spend(budget, 1)
    if typ is typing.Any:
        return True
    if is_dspy_type(typ):                   # its plain data; DSPy's own validator checks it (dspy_types)
        return isinstance(value, (dict, list, str))
    if typ is type(None) or typ is None:
        return value is None
    if typ is str:
        if isinstance(value, list):
            bad = next((i for i, v in enumerate(value) if not isinstance(v, str)), None)
            _spend(budget, len(value) if bad is None else bad + 1)      # (what was scanned)
            return bad is None
        return isinstance(value, str)
    if typ is bool:
        return isinstance(value, bool)
    if typ is int:
        return isinstance(value, int)
    if typ is float:
        return isinstance(value, (int, float))
    if typ is list:
        return isinstance(value, list)
    if typ is dict:
        return isinstance(value, dict)
    origin, args = typing.get_origin(typ), typing.get_args(typ)
    if origin is typing.Union:
        return any(_conforms(value, a, budget) for a in args)
    if origin is typing.Literal:
        _spend(budget, len(args))
        return any(value == a and type(value) is type(a) for a in args)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0], budget) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) and _conforms(v, args[1], budget)
                                               for k, v in value.items())
    return False


def describe_value(value: Any) -> str:
    """A value's JSON kind, for messages (never the value itself)."""
    if value is None:
        return "null"
    for t, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "text"),
                    (list, "a list"), (dict, "an object")):
        if isinstance(value, t):
            return name
    return type(value).__name__

