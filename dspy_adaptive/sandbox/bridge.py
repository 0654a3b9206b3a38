"""Host side of a sandboxed program's predictor and tool calls: the only place where anything a
specialist sends is acted on in the host process.

Every request arrives as a JSON frame from a worker that may be fully compromised. Before anything
runs, `parse_predict` / `parse_tool` turn it into a frozen request or refuse it:

* the signature goes through the strict grammar of `signature.py` (no DSPy string parsing: that
  walks the host's stack and imports modules); the host Signature is built from the parsed fields;
* the predictor receives exactly the declared input fields, as plain JSON values -- every other
  keyword (config, signature, demos, lm, _trace, ...) is refused, and no field may be NAMED after an
  argument DSPy's predictors take themselves (reserved.py reads them from DSPy), so nothing a
  specialist sends can change where or how often the host's LM is called or what its prompt holds;
* each value must fit its declared type (signature.conforms; a number given to a text field is sent
  as its text); a refusal names the kinds involved, never the value;
* names, instructions, fields, argument sizes and distinct predictors per call are capped
  (`BridgeLimits`), so a request cannot buy unbounded host CPU or memory;
* errors sent back into the sandbox say what failed in our own words plus an exception type name:
  never a repr of a host object, an LM's error text, or anything from the environment
  (`sandbox_error_text`); the full text stays on the host for the run record.

`PredictorBridge` serves one request's validated requests with host `dspy.Predict` /
`dspy.ChainOfThought` objects: ones the caller owns from before any request (`PredictorCache.lookup`),
else ones built for that request alone (no host cache a request can warm is shared with another),
and records every tool call it serves: the caller attaches them to the program's output
(`attach_tool_calls`), so a metric judges what was actually sent through a tool (`tool_calls_of`)
rather than what the program reports it sent.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import dspy
from dspy.utils.exceptions import AdapterParseError

from dspy_adaptive.escaping import CUSTOM_TYPE_MARKER
from dspy_adaptive.lm.adapter_memo import lm_context
from dspy_adaptive.lm.usage import role
from dspy_adaptive.sandbox.dspy_types import DspyValueError, deserialize, serialize
from dspy_adaptive.sandbox.reserved import predictor_arguments
from dspy_adaptive.sandbox.signature import (
    CheckTooCostly,
    ParsedSignature,
    SignatureError,
    check_budget,
    conforms,
    describe_value,
    parse_signature,
)

KINDS = ("Predict", "ChainOfThought")
_PNAME = re.compile(r"[A-Za-z0-9_.\[\]'\"-]{1,100}\Z")


@dataclass(frozen=True)
class BridgeLimits:
    """Caps on what one specialist call may ask of the host."""

    max_instructions_chars: int = 12_000   # one predictor's instructions
    max_argument_bytes: int = 256_000      # one predictor's or tool's arguments, as JSON
    max_result_bytes: int = 1_000_000      # one tool result sent back, as JSON
    max_predictors: int = 16               # distinct (name, kind, signature, instructions) per call
    max_json_depth: int = 16


class BridgeRefused(ValueError):
    """A request the host will not serve. Its message is ours and safe to send into the sandbox."""


@dataclass(frozen=True)
class PredictRequest:
    name: str                     # the predictor's attribute path in the program ("draft", "steps[0]")
    kind: str                     # "Predict" | "ChainOfThought"
    signature: ParsedSignature
    instructions: str | None
    inputs: Mapping[str, Any]     # exactly declared input fields, plain JSON values

    @property
    def key(self) -> tuple:
        """What makes two requests the same predictor."""
        return (self.name, self.kind, self.signature.text, self.instructions)


@dataclass(frozen=True)
class ToolRequest:
    name: str
    kwargs: Mapping[str, Any]     # plain JSON values


@dataclass(frozen=True)
class ToolCall:
    """One tool call a sandboxed program made, as the host received it (before the tool ran)."""

    name: str
    kwargs: Mapping[str, Any]

    def text(self) -> str:
        """Every argument value as text (strings as they are, other values as JSON), one per line."""
        return "\n".join(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in self.kwargs.values())


_TOOL_CALLS_ATTR = "_adaptive_tool_calls"


def attach_tool_calls(obj: Any, calls: Sequence[ToolCall]) -> None:
    """Record on a program's output the tool calls the host served for it, without adding a field."""
    try:
        object.__setattr__(obj, _TOOL_CALLS_ATTR, tuple(calls))
    except (AttributeError, TypeError):
        pass


def tool_calls_of(obj: Any) -> tuple[ToolCall, ...] | None:
    """The tool calls the host served for the sandboxed program that produced `obj` (a metric reads what
    was really sent, not what the program says it sent); None when `obj` did not come from a sandbox
    (the user's own in-process program, whose outputs are trusted)."""
    return getattr(obj, _TOOL_CALLS_ATTR, None)


# -------------------------------------------------------------------------------------------------
# validation (pure)
# -------------------------------------------------------------------------------------------------
def check_plain(value: Any, *, what: str, max_depth: int) -> None:
    """Raise BridgeRefused unless `value` is plain JSON data (str, int, float, bool, None, lists and
    str-keyed dicts of those) nested at most `max_depth` deep."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if depth > max_depth:
            raise BridgeRefused(f"{what} nests more than {max_depth} levels deep")
        if v is None or isinstance(v, (str, bool, int)):
            continue
        if isinstance(v, float):
            if not math.isfinite(v):
                raise BridgeRefused(f"{what} contains a non-finite number")
            continue
        if isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)
        elif isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise BridgeRefused(f"{what} has a non-string key")
                stack.append((x, depth + 1))
        else:
            raise BridgeRefused(f"{what} contains a {type(v).__name__}; only plain JSON values are allowed")


def json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


# DSPy's adapters turn text between its custom-type markers (escaping.CUSTOM_TYPE_MARKER, the prefix of
# dspy.adapters.types.base_type's identifiers) into real message parts (an image fetched by the provider): text a
# specialist sends must never carry them.
def _no_custom_type_markers(value: Any, what: str) -> None:
    """Refuse DSPy's custom-type markers anywhere in a specialist's text (an image or file smuggled into an LM
    call as text would be fetched by the provider: a channel out of the sandbox)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if CUSTOM_TYPE_MARKER in v:
                raise BridgeRefused(f"{what} carry DSPy's custom-type marker ({CUSTOM_TYPE_MARKER}...): send an "
                                    "image or file as a field declared with its DSPy type, never inside text")
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def _check_arguments(args: Any, *, what: str, limits: BridgeLimits) -> dict[str, Any]:
    if not isinstance(args, dict):
        raise BridgeRefused(f"{what} arguments must be keyword arguments")
    check_plain(args, what=f"{what} arguments", max_depth=limits.max_json_depth)
    _no_custom_type_markers(args, f"{what} arguments")
    size = json_size(args)
    if size > limits.max_argument_bytes:
        raise BridgeRefused(f"{what} arguments are {size} bytes as JSON (at most {limits.max_argument_bytes})")
    return dict(args)


def parse_predict(msg: Mapping[str, Any], limits: BridgeLimits | None = None) -> PredictRequest:
    """A worker's {"op": "predict", ...} frame as a PredictRequest, or BridgeRefused saying why."""
    limits = limits or BridgeLimits()
    name, kind, instructions = msg.get("name"), msg.get("kind"), msg.get("instructions")
    if not isinstance(name, str) or not _PNAME.match(name):
        raise BridgeRefused("predictor name must be an attribute path of at most 100 plain characters")
    if kind not in KINDS:
        raise BridgeRefused(f"predictor kind must be one of {', '.join(KINDS)}")
    try:
        sig = parse_signature(msg.get("signature"), predictor_arguments())
    except SignatureError as e:
        raise BridgeRefused(f"predictor {name!r}: {e}") from None
    if kind == "ChainOfThought" and "reasoning" in sig.output_names:
        raise BridgeRefused(f"predictor {name!r}: ChainOfThought adds its own 'reasoning' output; rename yours")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise BridgeRefused(f"predictor {name!r}: instructions must be text")
        if len(instructions) > limits.max_instructions_chars:
            raise BridgeRefused(f"predictor {name!r}: instructions are {len(instructions)} characters long "
                                f"(at most {limits.max_instructions_chars})")
        _no_custom_type_markers(instructions, f"predictor {name!r}: instructions")
    inputs = _check_arguments(msg.get("inputs"), what=f"predictor {name!r}", limits=limits)
    unknown = [k for k in inputs if k not in sig.input_names]
    if unknown:
        shown = ", ".join(repr(k[:40]) for k in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise BridgeRefused(f"predictor {name!r} takes only its input fields "
                            f"({', '.join(sig.input_names) or 'none'}); got {shown}")
    budget = check_budget()     # (one bound for all of this request's checks: signature.MAX_CHECK_STEPS)
    for f in sig.inputs:
        value = inputs.get(f.name)
        if value is None:   # absent or None: as DSPy, not checked
            continue
        if f.type is str and isinstance(value, (int, float)):   # a number or boolean in a text field: its text
            inputs[f.name] = json.dumps(value)
            continue
        try:
            fits = conforms(value, f.type, budget)
        except CheckTooCostly as e:
            raise BridgeRefused(f"predictor {name!r}: input {f.name!r}: {e}; send smaller values or declare "
                                "simpler types") from None
        if not fits:
            raise BridgeRefused(f"predictor {name!r}: input {f.name!r} is declared {f.type_text} but got "
                                f"{describe_value(value)}; pass a {f.type_text} or declare the field's type")
    return PredictRequest(name, kind, sig, instructions, inputs)


def typed_inputs(request: PredictRequest, sent: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A request's inputs, each field declared with a DSPy type as that type (`dspy_types.deserialize`; media
    only inline or as `sent`, the media locations the host sent this request); BridgeRefused when a value is
    not one."""
    types = {f.name: f.type for f in request.signature.inputs}
    try:
        return {k: deserialize(types[k], v, what=f"predictor {request.name!r}: input {k!r}", sent=sent)
                for k, v in request.inputs.items()}
    except DspyValueError as e:
        raise BridgeRefused(str(e)) from None


def parse_tool(msg: Mapping[str, Any], tool_names: tuple[str, ...],
               limits: BridgeLimits | None = None) -> ToolRequest:
    limits = limits or BridgeLimits()
    name = msg.get("name")
    if not isinstance(name, str) or name not in tool_names:
        shown = repr(name[:40]) if isinstance(name, str) else "a non-text name"
        raise BridgeRefused(f"there is no tool named {shown} (tools: {', '.join(tool_names) or 'none'})")
    kwargs = _check_arguments(msg.get("kwargs"), what=f"tool {name!r}", limits=limits)
    bad = [k for k in kwargs if not (k.isidentifier() and k.isascii() and not k.startswith("_") and len(k) <= 64)]
    if bad:
        raise BridgeRefused(f"tool {name!r}: keyword names must be plain identifiers; got {bad[0][:40]!r}")
    return ToolRequest(name, kwargs)


def check_tool_arguments(fn: Callable, request: ToolRequest) -> None:
    """Refuse keywords the tool does not declare (a `**kwargs` tool accepts any plain keyword)."""
    try:
        inspect.signature(fn).bind(**request.kwargs)
    except TypeError as e:
        raise BridgeRefused(f"tool {request.name!r}: {e}") from None
    except ValueError:   # no signature available (some builtins): the plain-JSON check is all we can do
        pass


def sandbox_error_text(exc: BaseException, what: str) -> str:
    """What the sandbox is told about a failed host call: our words and a type name, nothing else."""
    if isinstance(exc, BridgeRefused):
        return str(exc)
    if isinstance(exc, AdapterParseError):
        return f"{what}: the LM's answer could not be parsed into the output fields (AdapterParseError)"
    return f"{what} failed ({type(exc).__name__})"


def to_plain(value: Any, *, max_depth: int = 16) -> Any:
    """A host value as plain JSON data for the sandbox: Predictions and mappings become dicts, tuples
    become lists, DSPy's types their fields' data (`dspy_types.serialize`: an Image {"url": ...}); other
    objects become their str() (a tool's own result type). Never a host object."""
    if hasattr(value, "toDict") and callable(value.toDict):
        value = value.toDict()
    return json.loads(json.dumps(serialize(value), default=str, ensure_ascii=False))


# -------------------------------------------------------------------------------------------------
# host predictors
# -------------------------------------------------------------------------------------------------
_MAX_CACHED_INSTRUCTIONS = 4000


@functools.lru_cache(maxsize=256)
def _cached_host_signature(sig: ParsedSignature, instructions: str | None) -> type[dspy.Signature]:
    return _build_host_signature(sig, instructions)


def _build_host_signature(sig: ParsedSignature, instructions: str | None) -> type[dspy.Signature]:
    fields: dict[str, Any] = {}
    for f in sig.inputs:
        fields[f.name] = (f.type, dspy.InputField())
    for f in sig.outputs:
        fields[f.name] = (f.type, dspy.OutputField())
    return dspy.Signature(fields, instructions or None)


def host_signature(sig: ParsedSignature, instructions: str | None) -> type[dspy.Signature]:
    """The dspy.Signature for a parsed signature, built from its fields (never from text). Signature
    classes are immutable by DSPy convention and cost ~1 ms of pydantic work each, so they are shared;
    ones with long instructions are not kept (the cache stays small whatever a program sends)."""
    if instructions is not None and len(instructions) > _MAX_CACHED_INSTRUCTIONS:
        return _build_host_signature(sig, instructions)
    return _cached_host_signature(sig, instructions)


def host_predictor(kind: str, sig: ParsedSignature, instructions: str | None, shared: bool = True) -> dspy.Module:
    """A host Predict / ChainOfThought for a parsed signature. `shared=False` builds its signature afresh
    (for a predictor a request asked for: see PredictorBridge)."""
    cls = dspy.ChainOfThought if kind == "ChainOfThought" else dspy.Predict
    return cls(host_signature(sig, instructions) if shared else _build_host_signature(sig, instructions))


class PredictorCache:
    """Host predictor objects by (scope, request key), with the label each is known by in DSPy traces.
    Bounded (least recently used dropped first), so a program that invents new instructions on every
    call cannot grow host memory without limit.

    `lookup` is what a bridge may serve a request with across requests: nothing here (a subclass owns
    predictors made before any request, e.g. RoutedProgram's discovered ones). Everything else a request
    asks for is built for that request alone (PredictorBridge), so whether a predictor already exists can
    never tell one request what another asked for."""

    def __init__(self, max_entries: int = 128):
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple, dspy.Module] = OrderedDict()
        self._labels: OrderedDict[int, tuple[str, Any]] = OrderedDict()   # id -> (label, the object: no id reuse)

    def lookup(self, scope: Any, request: PredictRequest) -> dspy.Module | None:
        return None

    def get(self, scope: Any, request: PredictRequest, label: str, shared: bool = True) -> dspy.Module:
        key = (scope, *request.key)
        with self._lock:
            p = self._items.get(key)
            if p is not None:
                self._items.move_to_end(key)
                return p
        p = host_predictor(request.kind, request.signature, request.instructions, shared=shared)
        with self._lock:
            self._items[key] = p
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)
        self.remember(p, label)
        return p

    def remember(self, predictor: dspy.Module, label: str) -> None:
        """Name `predictor` (and its inner Predict) `label` in traces (the last 4 x max_entries named)."""
        with self._lock:
            for p in (predictor, *predictor.predictors()):
                self._labels[id(p)] = (label, p)
                self._labels.move_to_end(id(p))
            while len(self._labels) > 4 * self.max_entries:
                self._labels.popitem(last=False)

    def values(self) -> list[dspy.Module]:
        with self._lock:
            return list(self._items.values())

    def label_of(self, predictor: Any) -> str | None:
        with self._lock:
            hit = self._labels.get(id(predictor))
            return hit[0] if hit is not None and hit[1] is predictor else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class PredictorBridge:
    """Serves a sandboxed program's validated predictor and tool requests on the host, for ONE request.

    predictors: a PredictorCache (with `scope` naming the program in it, e.g. its slot), or a callable
        `(name, kind, signature_text, instructions) -> predictor` of the caller's own.
    tools: the functions the program may call by name. lm: the profile LM its predictors run on.
    role_name: files LM usage under that role (usage.py).
    sent: the media locations (image URLs, File data) the host sent this request (`dspy_types.sent_media` of
        its inputs): the only ones its predictors may be given besides inline data.

    A predictor the cache owns (`PredictorCache.lookup`) serves the request; any other is built for this
    request alone and dropped with it (it is only named in the cache, for traces).
    """

    def __init__(self, predictors: PredictorCache | Callable[..., dspy.Module], tools: Mapping[str, Callable],
                 lm: Any, role_name: str = "specialist", scope: Any = None, label: str = "program",
                 sent: frozenset[str] = frozenset()):
        self.predictors, self.tools, self.lm = predictors, tools, lm
        self.role_name, self.scope, self.label, self.sent = role_name, scope, label, sent
        self.tool_calls: list[ToolCall] = []   # every call served, in order (see `tool_calls_of`)
        self._own = PredictorCache(max_entries=32)   # this request's predictors

    def _predictor(self, request: PredictRequest) -> dspy.Module:
        if isinstance(self.predictors, PredictorCache):
            owned = self.predictors.lookup(self.scope, request)
            if owned is not None:
                return owned
            label = f"{self.label}.{request.name}"
            p = self._own.get(self.scope, request, label, shared=False)
            self.predictors.remember(p, label)
            return p
        return self.predictors(request.name, request.kind, request.signature.text, request.instructions)

    def predict(self, request: PredictRequest) -> dict[str, Any]:
        predictor = self._predictor(request)
        inputs = typed_inputs(request, self.sent)
        with lm_context(self.lm), role(self.role_name):
            pred = predictor(**inputs)
        return {k: pred[k] for k in pred.keys()}

    def tool(self, request: ToolRequest) -> Any:
        fn = self.tools.get(request.name)
        if fn is None:
            raise BridgeRefused(f"there is no tool named {request.name!r}")
        check_tool_arguments(fn, request)
        self.tool_calls.append(ToolCall(request.name, dict(request.kwargs)))   # recorded before it can act
        return fn(**request.kwargs)


def bridged_predictor(kind: str, signature: str, instructions: str | None) -> dspy.Module:
    """The host predictor for a sandboxed `dspy.<kind>(signature, instructions)`, through the strict
    grammar (raises BridgeRefused for anything else)."""
    try:
        sig = parse_signature(signature, predictor_arguments())
    except SignatureError as e:
        raise BridgeRefused(str(e)) from None
    return host_predictor(kind, sig, instructions)
