"""RoutedProgram: an LM router over a library of sandboxed specialists, with the user's program as fallback.

One call reads top to bottom:

    route    the router predictor (fast LM) reads the request's input fields and the numbered
             descriptions of the active slots, and answers a slot number (0 = fallback);
    resolve  an answer that is not an active slot, cannot be parsed, or names a slot whose source
             fails the sandbox policy or does not compile resolves to the fallback (reason kept);
    execute  the fallback runs in this process (it is the user's trusted code, on the deep LM);
             a specialist runs in a sandbox worker on its profile's LM (the `PROFILE` its source
             declares, read statically, else the slot's stored profile), its predictor calls bridged
             back here so DSPy's trace records them. A runtime failure inside a compiled specialist
             is NOT rerouted: it raises `SpecialistRuntimeError` carrying the route. Every LM call
             runs under the configured adapter, its system message memoised per signature when
             that adapter is one of DSPy's own (formatting.py);
    record   a frozen `RouteRecord` (selected slot, executed slot, router answer, reasons) is
             attached to the returned Prediction — read it with `route_of(pred)` — without adding
             any field the user's metric would see; so is the list of tool calls the host served for
             a specialist (`dspy_adaptive.sandbox.tool_calls_of(pred)`), so a metric can judge what
             was really sent through a tool rather than what the specialist says it sent.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import logging
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import dspy
from dspy.utils.exceptions import AdapterParseError

from dspy_adaptive.distill import serve as distilled
from dspy_adaptive.escaping import inert_custom_types, visible_controls
from dspy_adaptive.lm.adapter_memo import lm_context
from dspy_adaptive.lm.usage import role
from dspy_adaptive.program.library import FALLBACK, INACTIVE, Library
from dspy_adaptive.program.nesting import RoutedState, StudentAttributes
from dspy_adaptive.program.profiles import declared_profile, effective_profile
from dspy_adaptive.program.route_memo import RouteMemo
from dspy_adaptive.sandbox import (
    PredictorBridge,
    PredictorCache,
    SandboxPool,
    SpecialistError,
    attach_tool_calls,
    compile_program,
)
from dspy_adaptive.sandbox.bridge import (  # noqa: F401 (bridged_predictor is re-exported for the baselines)
    BridgeRefused,
    PredictRequest,
    bridged_predictor,
    host_predictor,
    parse_predict,
)
from dspy_adaptive.sandbox.compiler import source_hash
from dspy_adaptive.sandbox.dspy_types import DspyValueError, deserialize, involves, sent_media

_ROUTE_ATTR = "_adaptive_route"
logger = logging.getLogger(__name__)
_WARNED_EXTRA: set[tuple[str, ...]] = set()     # extra keywords already warned about (once per set of names)
_INT_RE = re.compile(r"-?\d+")


@dataclass(frozen=True)
class RouteRecord:
    """How one request was served. `executed` is what actually ran (0 = fallback)."""

    selected: int | None          # the router's parsed answer (None: unparseable / router failed to parse)
    executed: int                 # the slot that ran; 0 = the fallback
    router_answer: str | None     # raw router output (None when no router call was needed)
    fallback_reason: str | None   # why a selection resolved to the fallback (None if it did not)
    error: str | None = None      # runtime failure reason of the executed specialist
    error_kind: str | None = None
    decided_by: str | None = None     # "lm" (the router predictor), "distilled" (the distilled router), None: no router
    confidence: float | None = None   # the distilled router's calibrated confidence, when it was asked

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class SpecialistRuntimeError(RuntimeError):
    """A compiled specialist failed at run time. The search scores this rollout `failure_score`."""

    def __init__(self, route: RouteRecord):
        super().__init__(f"specialist slot {route.executed} failed: {route.error}")
        self.route = route


def route_of(obj: Any) -> RouteRecord | None:
    """The RouteRecord of a RoutedProgram output (Prediction) or of an exception it raised."""
    if isinstance(obj, SpecialistRuntimeError):
        return obj.route
    return getattr(obj, _ROUTE_ATTR, None)


def _attach(obj: Any, route: RouteRecord) -> None:
    try:
        object.__setattr__(obj, _ROUTE_ATTR, route)
    except (AttributeError, TypeError):
        pass


def parse_slot_answer(answer: Any) -> int | None:
    """First integer in the router's answer ("2", "Slot 2.", "[2]") or None."""
    if isinstance(answer, bool):
        return None
    if isinstance(answer, int):
        return answer
    m = _INT_RE.search(str(answer or ""))
    return int(m.group()) if m else None


def render_specialists(library: Library) -> str:
    """Numbered descriptions of the ACTIVE slots only, as the router reads them."""
    lines = [f"{k}: {library.slot(k).description}" for k in library.active_ids()]
    lines.append("0: none of the above (general-purpose fallback)")
    return "\n".join(lines)


# Signature classes are immutable by DSPy convention, and building one (a pydantic model) costs ~1 ms of
# CPU: every `with_library` variant the search evaluates would otherwise rebuild its router's and its
# specialists' signatures. Shared, they also keep the adapter's per-signature system-message memo warm.
@functools.lru_cache(maxsize=256)
def _router_signature(input_names: tuple[str, ...], instructions: str,
                      dspy_types: tuple[tuple[str, Any], ...] = ()) -> type[dspy.Signature]:
    """The router's signature: the request's fields (text, or the DSPy type the student declares for them, so an
    image reaches the router as an image), the numbered specialists, the chosen slot."""
    types = dict(dspy_types)
    fields: dict[str, Any] = {name: (types.get(name, str), dspy.InputField()) for name in input_names}
    fields["specialists"] = (str, dspy.InputField(desc="numbered descriptions of the available specialists"))
    fields["slot"] = (str, dspy.OutputField(desc="the number of the chosen specialist, or 0 for the fallback"))
    return dspy.Signature(fields, instructions)


def _trace_memo_hit(router: dspy.Predict, inputs: dict[str, Any], answer: str | None) -> None:
    """A memoised router decision still appears in DSPy's trace as the router's call, as an answer from the
    LM's response cache would: the records (and what reflection reads) do not depend on what was memoised."""
    trace = dspy.settings.trace
    if trace is None or dspy.settings.max_trace_size <= 0:
        return
    if len(trace) >= dspy.settings.max_trace_size:
        trace.pop(0)
    trace.append((router, inputs, dspy.Prediction(slot=answer)))


def normalise_tools(tools: Mapping[str, Callable] | Sequence[Callable] | None) -> dict[str, Callable]:
    if tools is None:
        return {}
    if isinstance(tools, Mapping):
        items = dict(tools)
    else:
        items = {getattr(t, "name", None) or getattr(t, "__name__", None): t for t in tools}
    for name, fn in items.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise ValueError(f"tool names must be public Python identifiers, got {name!r}")
        if not callable(fn):
            raise TypeError(f"tool {name!r} is not callable")
    return items


class ExportError(OSError):
    """`RoutedProgram.export` refused to write outside its directory."""


HIDDEN_SOURCE_NOTE = ("# NOT RUNNABLE AS WRITTEN: this source holds invisible or bidirectional control characters, "
                      "shown here as \\u escapes; the sandbox policy refuses it, so it never runs.\n")


def shown_source(source: str) -> str:
    """A program's source as exported: unchanged when what a person reads is what runs; otherwise (hidden
    characters, which the policy refuses) escaped visibly under a note saying it cannot run."""
    shown = visible_controls(source)
    return source if shown == source.replace("\r\n", "\n") and "\r" not in source else HIDDEN_SOURCE_NOTE + shown


def _check_inside(root: Path, relative: str) -> list[Path]:
    """The paths from `root` down to root/relative; ExportError if it leaves `root` or passes an existing
    symbolic link (which could point anywhere)."""
    base = root.resolve()
    target = base.joinpath(relative)
    if ".." in Path(relative).parts or Path(relative).is_absolute() or not target.is_relative_to(base):
        raise ExportError(f"refusing to write {relative!r} outside {base}")
    rel = target.relative_to(base)
    paths = [base / p for p in reversed(rel.parents[:-1])] + [target]
    for path in paths:
        if path.is_symlink():
            raise ExportError(f"refusing to write through the symbolic link {path}")
    return paths


def _write_inside(root: Path, relative: str, text: str) -> None:
    """Write `text` to root/relative (checked by `_check_inside`), creating its directory; the file is
    opened without following a link, so one created meanwhile is refused too."""
    *dirs, target = _check_inside(root, relative)
    for d in dirs:
        if not d.exists():
            d.mkdir()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(target, flags, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)


class SpecialistPredictors(PredictorCache):
    """The host side of every specialist predictor of one RoutedProgram.

    A specialist's predictors are created by its source, in the sandbox, but their *state* lives here, on
    host `dspy.Predict` / `dspy.ChainOfThought` objects: demos, instruction overrides, `lm`. Once a slot is
    *discovered* (its `__init__` run once in a sandbox worker, `SandboxPool.describe`), each predictor it
    creates has an owned host predictor under the stable name `slot<k>.<attribute path>`; when the sandboxed
    program calls that predictor, the bridge serves the call with the owned object (so its demos, its
    instructions and its lm apply, and DSPy's trace names it). A call the discovery did not foresee (a
    predictor made in `forward`, or with other instructions or fields) is served by a predictor built for
    that request alone (so what one request asked for never makes another request's call faster).
    """

    def __init__(self, max_entries: int = 128):
        super().__init__(max_entries)
        self.owned: dict[tuple[int, str], tuple[tuple, dspy.Module]] = {}   # (slot, name) -> (request key, pred)
        self.discovered: dict[int, str] = {}                               # slot -> source hash discovered
        self._owned_labels: dict[int, str] = {}

    def lookup(self, scope: Any, request: PredictRequest) -> dspy.Module | None:
        hit = self.owned.get((scope, request.name))
        return hit[1] if hit is not None and hit[0] == request.key else None

    def label_of(self, predictor: Any) -> str | None:
        label = self._owned_labels.get(id(predictor))
        return label if label is not None else super().label_of(predictor)

    def adopt(self, slot: int, source_hash: str, requests: Sequence[PredictRequest]) -> None:
        """Own a host predictor for each of `requests` (slot `slot`'s discovered predictors)."""
        for req in requests:
            if (slot, req.name) in self.owned:
                continue
            self.set_owned(slot, req.key, host_predictor(req.kind, req.signature, req.instructions))
        self.discovered[slot] = source_hash

    def set_owned(self, slot: int, key: tuple, predictor: dspy.Module) -> None:
        name = key[0]
        self.owned[(slot, name)] = (key, predictor)
        label = f"slot{slot}.{name}"
        self._owned_labels[id(predictor)] = label
        for inner in predictor.predictors():
            self._owned_labels[id(inner)] = label

    def named(self) -> list[tuple[str, dspy.Module]]:
        """(stable name, host module) of every owned predictor, by slot then discovery order."""
        return [(f"slot{slot}.{name}", pred) for (slot, name), (_, pred) in sorted(
            self.owned.items(), key=lambda kv: kv[0][0])]

    def drop_slot(self, slot: int) -> None:
        for key in [k for k in self.owned if k[0] == slot]:
            _, pred = self.owned.pop(key)
            self._owned_labels.pop(id(pred), None)
            for inner in pred.predictors():
                self._owned_labels.pop(id(inner), None)
        self.discovered.pop(slot, None)

    def __getstate__(self) -> dict[str, Any]:   # the owned predictors only (no lock, no labels)
        return {"max_entries": self.max_entries, "discovered": dict(self.discovered),
                "owned": [(slot, key, pred) for (slot, _), (key, pred) in self.owned.items()]}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["max_entries"])
        for slot, key, pred in state["owned"]:
            self.set_owned(slot, key, pred)
        self.discovered = dict(state["discovered"])

    def copy_owned(self, memo: dict | None = None) -> "SpecialistPredictors":
        """A new holder with deep copies of the owned predictors (no labels of per-request ones)."""
        other = SpecialistPredictors(self.max_entries)
        for (slot, _name), (key, pred) in self.owned.items():
            other.set_owned(slot, key, copy.deepcopy(pred, memo if memo is not None else {}))
        other.discovered = dict(self.discovered)
        return other


def _dspy_field_types(program: dspy.Module, side: str = "output_fields") -> tuple[tuple[str, Any], ...]:
    """(field, type) of the input or output fields that a program declaring its signature types with one of
    DSPy's types (`clock_photo: dspy.Image`, `code: dspy.Code`)."""
    fields = getattr(getattr(program, "signature", None), side, None) or {}
    return tuple((name, f.annotation) for name, f in fields.items() if involves(f.annotation))


def _infer_input_names(program: dspy.Module) -> tuple[str, ...] | None:
    """The input fields of a program that declares them (a Predict/ChainOfThought, or a module with a
    `signature`); None when it does not say."""
    sig = getattr(program, "signature", None)
    fields = getattr(sig, "input_fields", None)
    if fields:
        return tuple(fields)
    return None


class _Same:
    """`with_library`'s default: the variant shares this program's route memo."""


class RoutedProgram(StudentAttributes, dspy.Module):
    """Router -> specialist (sandboxed) or the frozen fallback. See the module docstring.

    A full DSPy module:

    * `named_predictors()` lists the router (`router`), every active specialist's predictors
      (`slot<k>.<attribute path>`, `.predict` appended for a ChainOfThought's inner Predict) and the
      fallback's (`fallback.<name>`), so `set_lm`, `BootstrapFewShot`, `dspy.GEPA` and friends run on a
      routed program and change it (demos, instructions, lm). A specialist's predictors are found by running
      its `__init__` once in a sandbox worker (see `SpecialistPredictors`).
    * `acall` / `aforward` run a call in a worker thread; `batch`, `dspy.Evaluate` and threads work as for
      any module.
    * Inside a larger module its predictors are the larger module's too (`outer.named_predictors()` lists
      `<name>.router`, `<name>.slot<k>.*`, `<name>.fallback.*`), so `outer.set_lm(lm)` reaches every one of them
      and optimizers run on `outer` see them. `named_parameters()` also lists `library` first, a parameter
      holding the program's whole state, so `outer.save()` / `outer.load()` carry the library with everything
      else (on load it is applied first). A routed program is never frozen as a submodule (dspy skips a
      submodule marked compiled; this one is always walked). `save(save_program=True)` pickles it (the sandbox
      pool is not pickled; a new one starts on first use).
    * Reading an attribute of the student it was built from (`routed.predictor`, `routed.hour_predictor`)
      reads the frozen fallback's, the program requests reach when they are not routed to a specialist. The
      routed program's own attributes always come first; setting such a name on it is refused (set it on
      `routed.fallback` instead).

    Args:
        program: the user's DSPy program; a frozen deep copy serves as the fallback (slot 0).
        library: the router instruction and specialist slots (default: an empty library, so every request
            goes to the fallback without a router call).
        fast_lm: the LM of the "fast" profile; the router always uses it (None: the configured LM).
        deep_lm: the LM of the "deep" profile; the fallback always uses it (None: the configured LM).
        tools: functions specialists may call by name (a mapping name -> function, or a list of functions
            named by their `__name__`).
        sandbox: a shared `SandboxPool` to run specialists in (default: one is started on first use and
            closed by `close()`).
        owns_sandbox: whether `close()` closes `sandbox` (default: only a pool this program started itself).
        route_memo: a `RouteMemo` of router decisions to share (a search's; default: none, the router is called
            every time).
        max_specialists: the number of slots of the default empty library (ignored when `library` is given).
        input_names: the request's input fields, which the router reads (default: the fallback's declared
            inputs, else learnt from the first call).
    """

    def __init__(
        self,
        program: dspy.Module,
        library: Library | None = None,
        *,
        fast_lm: Any = None,
        deep_lm: Any = None,
        tools: Mapping[str, Callable] | Sequence[Callable] | None = None,
        sandbox: SandboxPool | None = None,
        max_specialists: int = 5,
        input_names: Sequence[str] | None = None,
        owns_sandbox: bool | None = None,
        route_memo: RouteMemo | None = None,
    ):
        super().__init__()
        if not isinstance(program, dspy.Module):
            raise TypeError(f"RoutedProgram needs a dspy.Module as its fallback, got {type(program).__name__}")
        fallback = program.deepcopy()   # dspy's own deepcopy: falls back per attribute (e.g. dspy.Parallel)
        fallback._compiled = True  # frozen: optimizers walking the fallback on its own do not see it
        self.fallback = fallback
        library = library if library is not None else Library.empty(max_specialists)
        if not isinstance(library, Library):
            raise TypeError("library must be a dspy_adaptive.Library")
        self.fast_lm = fast_lm
        self.deep_lm = deep_lm
        self.tools = normalise_tools(tools)
        self.input_names = tuple(input_names) if input_names else _infer_input_names(program)
        self._sandbox = sandbox
        self._owns_sandbox = sandbox is None if owns_sandbox is None else bool(owns_sandbox)
        self._lock = threading.RLock()
        self._route_memo = route_memo
        self._distilled = distilled.DistilledServing()   # a distilled router serving this library, if any
        self._set_library(library)

    def _set_library(self, library: Library) -> None:
        """Take `library`: a fresh router (its instructions) and fresh specialist predictor state."""
        self._library = library
        self.router = dspy.Predict(_router_signature(self.input_names or ("request",), library.router,
                                                     _dspy_field_types(self.fallback, "input_fields")))
        self._predictors = SpecialistPredictors()

    # -- the library (the router predictor's instructions are its router text) -------------------------
    @property
    def library(self) -> Library:
        """The library this program routes over. Its router text is the router predictor's instructions, so
        an optimizer that rewrote them (dspy.GEPA) is reflected here, in `save` and in `export`."""
        text = self.router.signature.instructions
        if text != self._library.router:
            self._library = self._library.with_router(text)
        return self._library

    @library.setter
    def library(self, library: Library) -> None:
        if not isinstance(library, Library):
            raise TypeError("library must be a dspy_adaptive.Library")
        with self._lock:
            self._set_library(library)

    # -- building variants -----------------------------------------------------------------------
    def with_library(self, library: Library, *, owns_sandbox: bool = False,
                     route_memo: "RouteMemo | None | type[_Same]" = _Same) -> "RoutedProgram":
        """A RoutedProgram over `library` sharing this one's fallback, LMs, tools, sandbox and route memo (with
        a fresh router and fresh specialist predictors). `owns_sandbox=True` hands it the sandbox (its
        `close()` closes it: the program an optimizer returns); `route_memo=None` gives it no memo."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone._sandbox = self.sandbox
        clone._owns_sandbox = owns_sandbox
        clone._route_memo = self._route_memo if route_memo is _Same else route_memo
        clone._distilled = self._distilled.copy()   # dropped at its first use if the library differs
        clone._lock = threading.RLock()
        clone.__dict__.pop("detailed_results", None)
        clone._set_library(library)
        return clone

    @property
    def sandbox(self) -> SandboxPool:
        """The pool specialists run in: one started on first use, or -- when the pool it had was closed (by the
        program that owned it, or after unpickling) -- a new one with the same settings, owned by this program."""
        with self._lock:
            if self._sandbox is None:
                self._sandbox, self._owns_sandbox = SandboxPool(tool_names=tuple(self.tools)), True
            elif self._sandbox.closed:
                self._sandbox, self._owns_sandbox = self._sandbox.renewed(), True
            return self._sandbox

    def lm_for(self, profile: str) -> Any:
        lm = self.deep_lm if profile == "deep" else self.fast_lm
        return lm if lm is not None else dspy.settings.lm

    # -- one call ----------------------------------------------------------------------------------
    def forward(self, **inputs: Any) -> dspy.Prediction:
        request = self._request(inputs)
        return self._execute(inputs, *self._decide(request), request=request)

    def _request(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """What the router and the specialists see: the program's declared input fields only (a specialist is a
        drop-in for the program, so an extra keyword must not reach some routes and not others). The fallback --
        the program itself -- gets every keyword, as it would without the optimizer. A warning names extras."""
        if not self.input_names:
            return inputs
        extra = [k for k in inputs if k not in self.input_names]
        if not extra:
            return inputs
        if tuple(extra) not in _WARNED_EXTRA:
            _WARNED_EXTRA.add(tuple(extra))
            logger.warning("RoutedProgram: %s not among the program's input fields (%s): the router and the "
                           "specialists do not see %s; the fallback gets every keyword", ", ".join(map(repr, extra)),
                           ", ".join(self.input_names), "it" if len(extra) == 1 else "them")
        return {k: v for k, v in inputs.items() if k in self.input_names}

    def _decide(self, inputs: Mapping[str, Any]) -> tuple[int | None, str | None, dict[str, Any]]:
        """(selected, router answer, how): the distilled router's slot when it is confident enough, else the
        LM router's (dspy_adaptive.distill)."""
        decision = self._distilled.decide(self, inputs)
        if decision is not None and decision.accepted:
            return decision.slot, None, {"decided_by": "distilled", "confidence": decision.confidence}
        selected, answer = self._route(inputs)
        how = {"decided_by": "lm" if answer is not None else None,
               "confidence": decision.confidence if decision is not None else None}
        return selected, answer, how

    def _execute(self, inputs: dict[str, Any], selected: int | None, answer: str | None,
                 how: Mapping[str, Any] | None = None, request: dict[str, Any] | None = None) -> dspy.Prediction:
        """Resolve `selected` and run the slot it resolves to (or the fallback, with every keyword in `inputs`;
        a specialist gets `request`, the declared ones: `_request`); the route is attached."""
        how = dict(how or {})
        executed, reason = self._resolve(selected, answer)
        if executed == FALLBACK:
            route = RouteRecord(selected, FALLBACK, answer, reason, **how)
            try:
                with lm_context(self.lm_for("deep")), role("fallback"):
                    pred = self.fallback(**inputs)
            except Exception as e:  # the fallback's own failure: keep the route for the search's records
                _attach(e, route)
                raise
        else:
            pred, route = self._run_specialist(executed, inputs if request is None else request, selected, answer,
                                               how)
        _attach(pred, route)
        return pred

    async def aforward(self, **inputs: Any) -> dspy.Prediction:
        """`forward` in a worker thread (the sandbox round trip blocks), with this context's settings."""
        return await asyncio.to_thread(type(self).forward, self, **inputs)

    @property
    def route_memo(self) -> RouteMemo | None:
        """The router-decision memo this program shares with its `with_library` variants (None: none)."""
        return self._route_memo

    def _route(self, inputs: Mapping[str, Any]) -> tuple[int | None, str | None]:
        library = self.library
        if not library.active_ids():
            return FALLBACK, None  # nothing to choose from: no router call is spent
        specialists = render_specialists(library)
        key = None
        router = self._router_for(tuple(inputs))
        if self._route_memo is not None:
            key = RouteMemo.key(library.router, specialists, inputs)
            hit = self._route_memo.get(key)
            if hit is not None:
                _trace_memo_hit(router, {**inputs, "specialists": specialists}, hit[1])
                return hit
        try:
            with lm_context(self.lm_for("fast")), role("router"):
                out = router(**inputs, specialists=specialists)
        except AdapterParseError as e:
            return None, f"<unparseable router output: {str(e)[:200]}>"
        answer = str(out.slot)
        decision = (parse_slot_answer(answer), answer)
        if key is not None:
            self._route_memo.put(key, decision)
        return decision

    def _resolve(self, selected: int | None, answer: str | None) -> tuple[int, str | None]:
        if selected is None:
            return FALLBACK, f"router answer {answer!r} is not a slot number"
        if selected == FALLBACK:
            return FALLBACK, None
        if selected not in self._library.active_ids():
            return FALLBACK, f"router chose slot {selected}, which is not an active specialist"
        source = self._library.slot(selected).program_source
        compiled = compile_program(source)
        if not compiled.ok:
            return FALLBACK, f"slot {selected}'s program does not compile: " + "; ".join(compiled.reasons)
        _, problem = declared_profile(source)
        if problem:
            return FALLBACK, f"slot {selected}'s program declares no valid profile: {problem}"
        return selected, None

    def _run_specialist(self, k: int, inputs: dict, selected: int | None, answer: str | None,
                        how: Mapping[str, Any] | None = None):
        how = dict(how or {})
        slot = self._library.slot(k)
        program = compile_program(slot.program_source).program
        # its predictors are owned from its __init__ (found once per source), so requests share only what no
        # request decided; anything else a request asks for is built for it alone (bridge.PredictorBridge)
        self._discover_slot(k, slot.program_source, program.source_hash)
        lm = self.lm_for(effective_profile(slot.program_source, slot.profile))   # its PROFILE, read statically
        sent = sent_media(inputs)     # the media it may pass on; any other location it names is refused
        bridge = PredictorBridge(self._predictors, self.tools, lm, scope=k, label=f"slot{k}", sent=sent)
        try:
            fields = self.sandbox.run(program, dict(inputs), bridge)
        except SpecialistError as e:
            route = RouteRecord(selected, k, answer, None, error=e.reason, error_kind=e.kind, **how)
            raise SpecialistRuntimeError(route) from e
        types = dict(_dspy_field_types(self.fallback))
        pred = dspy.Prediction()
        for name, value in fields.items():   # not Prediction(**fields): a field named "base" is a constructor argument
            value = inert_custom_types(value)   # (DSPy's media marker: any prompt showing it would fetch its URL)
            try:                             # the student's DSPy-typed outputs come back as those types
                pred[name] = deserialize(types[name], value, what=f"output {name!r}", sent=sent) \
                    if name in types else value
            except DspyValueError as e:
                raise SpecialistRuntimeError(RouteRecord(selected, k, answer, None, error=str(e),
                                                         error_kind="output")) from None
        attach_tool_calls(pred, bridge.tool_calls)   # what it really sent through tools, for the metric
        return pred, RouteRecord(selected, k, answer, None, **how)

    # -- the distilled router (dspy_adaptive.distill) ---------------------------------------------------
    def distill_router(self, requests: Sequence[Any] = (), settings: Any = None, **options: Any):
        """Learn the LM router's decisions on `requests` (examples, input dicts or texts: e.g. the train and
        validation sets plus logged traffic) with a calibrated classifier and serve with it: a request it is
        not confident about still goes to the LM router. Returns the `DistilledRouter`
        (`dspy_adaptive.distill.distill_router` documents the options)."""
        from dspy_adaptive.distill import distill_router
        return distill_router(self, requests, settings, **options)

    @property
    def distilled_router(self) -> Any:
        """The distilled router serving this program (None: the LM router decides every request)."""
        return self._distilled.current(self)

    def use_distilled_router(self, router: Any) -> None:
        """Serve with `router` (a `DistilledRouter` distilled from this program), or None to stop."""
        self._distilled.attach(self, router)

    # -- the router predictor -----------------------------------------------------------------------
    def _router_for(self, input_names: tuple[str, ...]) -> dspy.Predict:
        """The router predictor, its input fields made to match this call's (keeping its state)."""
        router = self.router
        if tuple(router.signature.input_fields)[:-1] == input_names:
            return router
        with self._lock:
            router = self.router
            if tuple(router.signature.input_fields)[:-1] != input_names:
                sig = _router_signature(input_names, router.signature.instructions,
                                        _dspy_field_types(self.fallback, "input_fields"))
                fresh = dspy.Predict(sig)
                fresh.demos, fresh.lm = list(router.demos), router.lm
                self.router, self.input_names = fresh, input_names
                router = fresh
        return router

    def predictor_label(self, predictor: Any) -> str:
        """A readable name for a predictor seen in a DSPy trace: router, slot<k>.<name>, fallback.<name>."""
        if predictor is self.router:
            return "router"
        label = self._predictors.label_of(predictor)
        if label is not None:
            return label
        for name, p in self.fallback.named_predictors():
            if p is predictor:
                return "fallback" if name == "self" else f"fallback.{name}"
        return type(predictor).__name__

    # -- a DSPy module's parameters -------------------------------------------------------------------
    def discover(self) -> None:
        """Find every active specialist's predictors (its `__init__`, run once in a sandbox worker per
        source) and own a host predictor for each. A slot whose source does not compile, or whose
        `__init__` fails, has none. Slots no longer active (or whose source changed) lose theirs."""
        library = self._library
        with self._lock:
            for slot in list(self._predictors.discovered):
                if slot not in library.active_ids() or \
                        self._predictors.discovered[slot] != source_hash(library.slot(slot).program_source):
                    self._predictors.drop_slot(slot)
            for k in library.active_ids():
                self._discover_slot(k, library.slot(k).program_source)

    def _discover_slot(self, k: int, source: str, h: str | None = None) -> None:
        """Own host predictors for slot k's source (its `__init__`, run once per source), unless done."""
        h = h or source_hash(source)
        if self._predictors.discovered.get(k) == h:
            return
        with self._lock:
            if self._predictors.discovered.get(k) == h:
                return
            if k in self._predictors.discovered:
                self._predictors.drop_slot(k)
            compiled = compile_program(source)
            requests: tuple = ()
            if compiled.ok:
                try:
                    requests = _discover_cached(self.sandbox, compiled.program)
                except SpecialistError:
                    requests = ()
            self._predictors.adopt(k, h, requests)

    def named_parameters(self):
        """library (the whole state, see `RoutedState`), router, slot<k>.<name> (each active specialist's
        predictors), fallback.<name>: stable names."""
        return [("library", RoutedState(self)), *self._predictor_parameters()]

    def _predictor_parameters(self):
        self.discover()
        out: list[tuple[str, Any]] = [("router", self.router)]
        for name, module in self._predictors.named():
            if isinstance(module, dspy.Predict):
                out.append((name, module))
            else:
                out.extend((f"{name}.{sub}", p) for sub, p in module.named_predictors())
        seen = {id(p) for _, p in out}
        for name, param in self.fallback.named_parameters():   # frozen only as a submodule: walked here
            if id(param) not in seen:
                seen.add(id(param))
                out.append(("fallback" if name == "self" else f"fallback.{name}", param))
        return out

    @property
    def lm(self) -> Any:
        """The LM every predictor of this program uses when they all use the same one (None otherwise).
        Setting it sets every predictor's (what `dspy.Module.set_lm` on a module holding this one does)."""
        lms = {id(p.lm): p.lm for _, p in self._predictor_parameters() if isinstance(p, dspy.Module)}
        return next(iter(lms.values())) if len(lms) == 1 else None

    @lm.setter
    def lm(self, lm: Any) -> None:
        for _, p in self._predictor_parameters():
            if isinstance(p, dspy.Module):
                p.lm = lm

    def reset(self) -> None:
        """Reset every predictor (demos, lm); the library is kept (`reset_copy` of a module holding this one)."""
        for _, p in self._predictor_parameters():
            if hasattr(p, "reset"):
                p.reset()

    # -- persistence -----------------------------------------------------------------------------------
    def dump_state(self, json_mode: bool = True) -> dict[str, Any]:
        self.discover()
        specialists = []
        for (slot, name), (key, pred) in sorted(self._predictors.owned.items(), key=lambda kv: kv[0][0]):
            _, kind, signature, instructions = key
            specialists.append({"slot": slot, "name": name, "kind": kind, "signature": signature,
                                "instructions": instructions, "state": pred.dump_state(json_mode=json_mode)})
        state = {
            "library": self.library.to_dict(),
            "fallback": self.fallback.dump_state(json_mode=json_mode),
            "tools": sorted(self.tools),
            "input_names": list(self.input_names) if self.input_names else None,
            "router": self.router.dump_state(json_mode=json_mode),
            "specialists": specialists,
        }
        saved = self._distilled.dump(self)
        if saved is not None:
            state[distilled.STATE_KEY] = saved
        return state

    def load_state(self, state: dict[str, Any], *, allow_unsafe_lm_state: bool = False) -> None:
        if "library" not in state or "fallback" not in state:
            raise ValueError("not a RoutedProgram state: expected keys 'library' and 'fallback'")
        library = Library.from_dict(state["library"])
        saved_router = distilled.parse(state)   # a malformed or tampered one is refused before anything loads
        specialists = []
        for entry in state.get("specialists") or ():
            try:   # the signature text goes through the sandbox bridge's strict grammar again
                req = parse_predict({"name": entry["name"], "kind": entry["kind"], "signature": entry["signature"],
                                     "instructions": entry["instructions"], "inputs": {}})
            except (BridgeRefused, KeyError, TypeError) as e:
                raise ValueError(f"not a RoutedProgram state: bad specialist predictor entry ({e})") from None
            specialists.append((int(entry["slot"]), req, entry.get("state") or {}))
        self.fallback.load_state(state["fallback"], allow_unsafe_lm_state=allow_unsafe_lm_state)
        with self._lock:
            if state.get("input_names"):
                self.input_names = tuple(state["input_names"])
            self._set_library(library)
            if state.get("router"):
                self.router.load_state(state["router"], allow_unsafe_lm_state=allow_unsafe_lm_state)
                if self.router.signature.instructions != library.router:   # the library's text is the router's
                    self.router.signature = self.router.signature.with_instructions(library.router)
            for slot, req, pred_state in specialists:
                pred = host_predictor(req.kind, req.signature, req.instructions)
                pred.load_state(pred_state, allow_unsafe_lm_state=allow_unsafe_lm_state)
                self._predictors.set_owned(slot, req.key, pred)
            for slot in {slot for slot, _, _ in specialists}:
                if slot in library.active_ids():
                    self._predictors.discovered[slot] = source_hash(library.slot(slot).program_source)
            self._distilled.restore(self, saved_router)

    def export(self, directory: str | Path) -> Path:
        """Write the library for people to read: router.txt, library.json,
        slot_k/{description.txt, program.py, profile, active}, and distilled_router.{json,txt} when a
        distilled router serves the program (when none does, those of an earlier export are removed: every
        file in `directory` describes this program).

        What is shown is what runs: router and descriptions are written with hidden characters
        (bidirectional controls, zero-width characters, ...) as visible escapes, library.json is ASCII
        JSON, and a program whose source holds such characters -- which the sandbox policy refuses, so
        it never runs -- is written escaped under a first line saying so. Every file is written inside
        `directory` (never through a symbolic link); anything else raises `ExportError`."""
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        files = {"router.txt": visible_controls(self.library.router) + "\n",
                 "library.json": json.dumps(self.library.to_dict(), indent=2, sort_keys=True) + "\n"}
        for k, slot in self.library.items():
            d = f"slot_{int(k)}"
            files[f"{d}/description.txt"] = visible_controls(slot.description) + "\n"
            files[f"{d}/program.py"] = shown_source(slot.program_source)
            files[f"{d}/profile"] = visible_controls(slot.profile) + "\n"
            files[f"{d}/active"] = ("yes" if slot.active else "no") + "\n"
        files.update(distilled.export_files(self._distilled.current(self)))
        stale = [name for name in distilled.EXPORT_NAMES if name not in files]
        for relative in (*files, *stale):       # refuse before writing anything
            _check_inside(root, relative)
        for relative, text in files.items():
            _write_inside(root, relative, text)
        for relative in stale:
            (root / relative).unlink(missing_ok=True)
        return root

    def close(self) -> None:
        if self._owns_sandbox and self._sandbox is not None:
            self._sandbox.close()

    def __deepcopy__(self, memo):
        clone = object.__new__(type(self))
        memo[id(self)] = clone
        clone.__dict__.update(self.__dict__)
        clone._sandbox = self.sandbox
        clone._owns_sandbox = False
        clone._lock = threading.RLock()
        clone.__dict__.pop("detailed_results", None)
        clone.fallback = self.fallback.deepcopy()
        clone.router = copy.deepcopy(self.router, memo)
        clone._predictors = self._predictors.copy_owned(memo)
        clone._distilled = self._distilled.copy()           # the copy serves as this one does
        clone.callbacks = list(self.callbacks)
        clone.history = []
        return clone

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        for key in ("_lock", "_sandbox", "_route_memo"):
            state.pop(key, None)
        state["_owns_sandbox"] = True
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._lock = threading.RLock()
        self._sandbox = None
        self._route_memo = None

    def __repr__(self) -> str:
        active = ", ".join(f"{k}: {self._library.slot(k).description[:40]!r}" for k in self._library.active_ids())
        return f"RoutedProgram(active=[{active}], fallback={type(self.fallback).__name__})"


_DISCOVERED: "OrderedDict[str, tuple[PredictRequest, ...]]" = OrderedDict()
_DISCOVERED_LOCK = threading.Lock()


def _discover_cached(pool: SandboxPool, program: Any) -> tuple[PredictRequest, ...]:
    """`pool.describe(program)`, once per source (an LRU of 512 sources)."""
    key = program.source_hash
    with _DISCOVERED_LOCK:
        hit = _DISCOVERED.get(key)
        if hit is not None:
            _DISCOVERED.move_to_end(key)
            return hit
    found = pool.describe(program)
    with _DISCOVERED_LOCK:
        _DISCOVERED[key] = found
        while len(_DISCOVERED) > 512:
            _DISCOVERED.popitem(last=False)
    return found


__all__ = ["ExportError", "INACTIVE", "PredictorBridge", "RouteRecord", "RoutedProgram", "RoutedState",
           "SpecialistPredictors",
           "SpecialistRuntimeError", "normalise_tools", "parse_slot_answer", "render_specialists", "route_of",
           "shown_source"]
