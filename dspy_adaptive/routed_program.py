"""RoutedProgram: an LM router over a library of sandboxed specialists, with the user's program as fallback.

One call reads top to bottom:

    route    the router predictor (fast LM) reads the request's input fields and the numbered
             descriptions of the active slots, and answers a slot number (0 = fallback);
    resolve  an answer that is not an active slot, cannot be parsed, or names a slot whose source
             fails the sandbox policy or does not compile resolves to the fallback (reason kept);
    execute  the fallback runs in this process (it is the user's trusted code, on the deep LM);
             a specialist runs in a sandbox worker on its profile's LM, its predictor calls bridged
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

import copy
import functools
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import dspy
from dspy.utils.exceptions import AdapterParseError

from dspy_adaptive.formatting import lm_context
from dspy_adaptive.library import FALLBACK, INACTIVE, Library
from dspy_adaptive.sandbox import (
    PredictorBridge,
    PredictorCache,
    SandboxPool,
    SpecialistError,
    attach_tool_calls,
    compile_program,
)
from dspy_adaptive.sandbox.bridge import bridged_predictor  # noqa: F401 (re-exported for the baselines)
from dspy_adaptive.untrusted import visible_controls
from dspy_adaptive.usage import role

_ROUTE_ATTR = "_adaptive_route"
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
def _router_signature(input_names: tuple[str, ...], instructions: str) -> type[dspy.Signature]:
    fields: dict[str, Any] = {name: (str, dspy.InputField()) for name in input_names}
    fields["specialists"] = (str, dspy.InputField(desc="numbered descriptions of the available specialists"))
    fields["slot"] = (str, dspy.OutputField(desc="the number of the chosen specialist, or 0 for the fallback"))
    return dspy.Signature(fields, instructions)


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


class RoutedProgram(dspy.Module):
    """Router -> specialist (sandboxed) or the frozen fallback. See the module docstring.

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
        max_specialists: the number of slots of the default empty library (ignored when `library` is given).
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
    ):
        super().__init__()
        if not isinstance(program, dspy.Module):
            raise TypeError(f"RoutedProgram needs a dspy.Module as its fallback, got {type(program).__name__}")
        fallback = copy.deepcopy(program)
        fallback._compiled = True  # frozen: optimizers walking named_parameters() do not see it
        self.fallback = fallback
        self.library = library if library is not None else Library.empty(max_specialists)
        if not isinstance(self.library, Library):
            raise TypeError("library must be a dspy_adaptive.Library")
        self.fast_lm = fast_lm
        self.deep_lm = deep_lm
        self.tools = normalise_tools(tools)
        self._sandbox = sandbox
        self._owns_sandbox = sandbox is None
        self._lock = threading.Lock()
        self._routers: dict[tuple[str, ...], dspy.Predict] = {}
        self._predictors = PredictorCache()
        self._route_memo: dict[tuple, tuple[int | None, str | None]] | None = None

    # -- building variants -----------------------------------------------------------------------
    def with_library(self, library: Library) -> "RoutedProgram":
        """A RoutedProgram over `library` sharing this one's fallback, LMs, tools and sandbox."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.library = library
        clone._sandbox = self.sandbox
        clone._owns_sandbox = False
        clone._lock = threading.Lock()
        clone._routers = {}
        clone._predictors = PredictorCache()
        return clone

    @property
    def sandbox(self) -> SandboxPool:
        with self._lock:
            if self._sandbox is None:
                self._sandbox = SandboxPool(tool_names=tuple(self.tools))
            return self._sandbox

    def lm_for(self, profile: str) -> Any:
        lm = self.deep_lm if profile == "deep" else self.fast_lm
        return lm if lm is not None else dspy.settings.lm

    # -- one call ----------------------------------------------------------------------------------
    def forward(self, **inputs: Any) -> dspy.Prediction:
        selected, answer = self._route(inputs)
        executed, reason = self._resolve(selected, answer)
        if executed == FALLBACK:
            route = RouteRecord(selected, FALLBACK, answer, reason)
            try:
                with lm_context(self.lm_for("deep")), role("fallback"):
                    pred = self.fallback(**inputs)
            except Exception as e:  # the fallback's own failure: keep the route for the search's records
                _attach(e, route)
                raise
        else:
            pred, route = self._run_specialist(executed, inputs, selected, answer)
        _attach(pred, route)
        return pred

    def share_route_memo(self) -> None:
        """Memoise router decisions per (router text, active descriptions, request) across this program and
        every `with_library` variant made from it afterwards. The router prompt is then identical, so this
        gives what DSPy's LM cache would (the paper's runs kept actor caching on) without re-running the
        adapter; the search enables it, a deployed RoutedProgram does not."""
        self._route_memo = {}

    def _route(self, inputs: Mapping[str, Any]) -> tuple[int | None, str | None]:
        if not self.library.active_ids():
            return FALLBACK, None  # nothing to choose from: no router call is spent
        specialists = render_specialists(self.library)
        key = None
        if self._route_memo is not None:
            key = (self.library.router, specialists, json.dumps(dict(inputs), sort_keys=True, default=str))
            hit = self._route_memo.get(key)
            if hit is not None:
                return hit
        router = self._router_for(tuple(inputs))
        try:
            with lm_context(self.lm_for("fast")), role("router"):
                out = router(**inputs, specialists=specialists)
        except AdapterParseError as e:
            return None, f"<unparseable router output: {str(e)[:200]}>"
        answer = str(out.slot)
        decision = (parse_slot_answer(answer), answer)
        if key is not None:
            self._route_memo[key] = decision
        return decision

    def _resolve(self, selected: int | None, answer: str | None) -> tuple[int, str | None]:
        if selected is None:
            return FALLBACK, f"router answer {answer!r} is not a slot number"
        if selected == FALLBACK:
            return FALLBACK, None
        if selected not in self.library.active_ids():
            return FALLBACK, f"router chose slot {selected}, which is not an active specialist"
        compiled = compile_program(self.library.slot(selected).program_source)
        if not compiled.ok:
            return FALLBACK, f"slot {selected}'s program does not compile: " + "; ".join(compiled.reasons)
        return selected, None

    def _run_specialist(self, k: int, inputs: dict, selected: int | None, answer: str | None):
        slot = self.library.slot(k)
        program = compile_program(slot.program_source).program
        bridge = PredictorBridge(self._predictors, self.tools, self.lm_for(slot.profile), scope=k, label=f"slot{k}")
        try:
            fields = self.sandbox.run(program, dict(inputs), bridge)
        except SpecialistError as e:
            route = RouteRecord(selected, k, answer, None, error=e.reason, error_kind=e.kind)
            raise SpecialistRuntimeError(route) from e
        pred = dspy.Prediction()
        for name, value in fields.items():   # not Prediction(**fields): a field named "base" is a constructor argument
            pred[name] = value
        attach_tool_calls(pred, bridge.tool_calls)   # what it really sent through tools, for the metric
        return pred, RouteRecord(selected, k, answer, None)

    # -- predictor caches (stable objects so DSPy traces name the same predictor each time) --------
    def _router_for(self, input_names: tuple[str, ...]) -> dspy.Predict:
        key = (self.library.router,) + input_names
        with self._lock:
            if key not in self._routers:
                self._routers[key] = dspy.Predict(_router_signature(input_names, self.library.router))
            return self._routers[key]

    def predictor_label(self, predictor: Any) -> str:
        """A readable name for a predictor seen in a DSPy trace: router, slot<k>.<name>, fallback.<name>."""
        with self._lock:
            if any(p is predictor for p in self._routers.values()):
                return "router"
        label = self._predictors.label_of(predictor)
        if label is not None:
            return label
        for name, p in self.fallback.named_predictors():
            if p is predictor:
                return f"fallback.{name}"
        return type(predictor).__name__

    def named_predictors(self):
        """The router predictors (fallback is frozen; specialist predictors are owned by their source)."""
        return [(f"router[{i}]", p) for i, p in enumerate(self._routers.values())]

    # -- persistence -----------------------------------------------------------------------------------
    def dump_state(self, json_mode: bool = True) -> dict[str, Any]:
        return {
            "library": self.library.to_dict(),
            "fallback": self.fallback.dump_state(json_mode=json_mode),
            "tools": sorted(self.tools),
        }

    def load_state(self, state: dict[str, Any], *, allow_unsafe_lm_state: bool = False) -> None:
        if "library" not in state or "fallback" not in state:
            raise ValueError("not a RoutedProgram state: expected keys 'library' and 'fallback'")
        library = Library.from_dict(state["library"])
        self.fallback.load_state(state["fallback"], allow_unsafe_lm_state=allow_unsafe_lm_state)
        self.library = library
        self._routers, self._predictors = {}, PredictorCache()

    def export(self, directory: str | Path) -> Path:
        """Write the library for people to read: router.txt, library.json and
        slot_k/{description.txt, program.py, profile, active}.

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
        for relative in files:                  # refuse before writing anything
            _check_inside(root, relative)
        for relative, text in files.items():
            _write_inside(root, relative, text)
        return root

    def close(self) -> None:
        if self._owns_sandbox and self._sandbox is not None:
            self._sandbox.close()

    def __deepcopy__(self, memo):
        clone = self.with_library(self.library)
        clone.fallback = copy.deepcopy(self.fallback, memo)
        return clone

    def __repr__(self) -> str:
        active = ", ".join(f"{k}: {self.library.slot(k).description[:40]!r}" for k in self.library.active_ids())
        return f"RoutedProgram(active=[{active}], fallback={type(self.fallback).__name__})"


__all__ = ["ExportError", "INACTIVE", "PredictorBridge", "RouteRecord", "RoutedProgram", "SpecialistRuntimeError",
           "normalise_tools", "parse_slot_answer", "render_specialists", "route_of", "shown_source"]
