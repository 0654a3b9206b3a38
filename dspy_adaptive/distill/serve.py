"""The distilled router inside a RoutedProgram: binding, serving, saving (the program owns a DistilledServing).

A distilled router serves only the program it was distilled from: the same library (content hash), the same
router predictor state (its demos) and the same input fields. When any of them changes it is dropped, with a
warning, and the LM router decides again -- at the next request, when the program is saved or exported, and
when a saved program is loaded. A saved router that is malformed or tampered with is refused with
`DistilledRouterError` before anything is loaded.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from dspy_adaptive.distill.embed import is_available
from dspy_adaptive.distill.model import Binding, Decision, DistilledRouter, DistilledRouterError, router_hash

#: a dspy_adaptive.program.routed.RoutedProgram (not imported: it imports this package)
RoutedProgram = Any


log = logging.getLogger(__name__)
STATE_KEY = "distilled_router"


def binding_of(routed: "RoutedProgram", input_names: tuple[str, ...] | None = None) -> Binding:
    """What a router distilled from `routed` now is bound to."""
    names = tuple(input_names or routed.input_names or ())
    if not names:
        raise ValueError("the program does not know its input fields yet: pass input_names=... to RoutedProgram "
                         "or call it once")
    return Binding(routed.library.content_hash, router_hash(routed.router.demos), names)


class DistilledServing:
    """The distilled router a RoutedProgram serves with, and whether it still serves it. The program owns one
    (and a fresh one per `with_library` variant); it reads the program's library, router demos and input fields
    through the program it is given and never changes the program."""

    def __init__(self) -> None:
        self._router: DistilledRouter | None = None
        self._checked_library: Any = None     # the library object last found to match (a cheap identity check)

    def copy(self) -> "DistilledServing":
        """A serving of its own with the same distilled router, checked against its program when next used (a
        program variant over another library drops it then, with a warning)."""
        other = DistilledServing()
        other._router = self._router
        return other

    def mismatch(self, routed: "RoutedProgram", d: DistilledRouter) -> str | None:
        """Why `d` does not serve `routed` (None: it does)."""
        lib = routed.library
        if self._checked_library is not lib:
            if lib.content_hash != d.binding.library_hash:
                return (f"the library changed (distilled for {d.binding.library_hash[:12]}, now "
                        f"{lib.content_hash[:12]})")
            self._checked_library = lib
        if router_hash(routed.router.demos) != d.binding.router_hash:
            return "the router predictor's demos changed"
        if routed.input_names and tuple(routed.input_names) != d.binding.input_names:
            return f"the input fields changed ({list(d.binding.input_names)} -> {list(routed.input_names)})"
        if d.features.kind == "embedding" and not is_available(d.features.embedder):
            return f"its text embedder {d.features.embedder!r} is not available here"
        return None

    def drop(self, why: str) -> None:
        self._router, self._checked_library = None, None
        log.warning("dropped the distilled router: %s; the LM router decides every request. Distill again with "
                    "routed.distill_router(requests).", why)

    def current(self, routed: "RoutedProgram") -> DistilledRouter | None:
        """The distilled router if it still serves `routed` (otherwise it is dropped here)."""
        d = self._router
        if d is None:
            return None
        why = self.mismatch(routed, d)
        if why is not None:
            self.drop(why)
            return None
        return d

    def attach(self, routed: "RoutedProgram", d: DistilledRouter | None) -> None:
        """Serve `routed` with `d` (None: the LM router only); `DistilledRouterError` if `d` is for another
        program."""
        self._checked_library = None
        if d is None:
            self._router = None
            return
        if not isinstance(d, DistilledRouter):
            raise TypeError(f"expected a DistilledRouter, got {type(d).__name__}")
        why = self.mismatch(routed, d)
        if why is not None:
            raise DistilledRouterError(f"this distilled router does not serve this program: {why}")
        self._router = d

    def decide(self, routed: "RoutedProgram", inputs: Mapping[str, Any]) -> Decision | None:
        """The distilled router's decision for a request, or None when there is none (or it failed: the LM
        router then decides, and the failure is logged)."""
        d = self.current(routed)
        if d is None:
            return None
        try:
            return d.decide(inputs)
        except Exception as e:  # noqa: BLE001 - never worse than the LM router: it decides instead
            log.warning("the distilled router failed on a request (%s: %s); the LM router decided it",
                        type(e).__name__, str(e)[:200])
            return None

    def dump(self, routed: "RoutedProgram") -> dict[str, Any] | None:
        d = self.current(routed)
        return d.to_dict() if d is not None else None

    def restore(self, routed: "RoutedProgram", d: DistilledRouter | None) -> None:
        """After a state is loaded: serve with its distilled router if it is for this program, else drop it."""
        self._router, self._checked_library = d, None
        if d is not None and (why := self.mismatch(routed, d)) is not None:
            self.drop(f"the saved one is not for this program: {why}")


def parse(state: Mapping[str, Any]) -> DistilledRouter | None:
    """The saved distilled router of a program state, checked (raises `DistilledRouterError`), or None."""
    data = state.get(STATE_KEY)
    return None if data is None else DistilledRouter.from_dict(data)


#: The files `export_files` writes; a library exported without a distilled router has none of them.
EXPORT_NAMES = ("distilled_router.json", "distilled_router.txt")


def export_files(d: DistilledRouter | None) -> dict[str, str]:
    """distilled_router.json (the data) and distilled_router.txt (for people) when there is one (EXPORT_NAMES)."""
    import json

    from dspy_adaptive.escaping import visible_controls

    if d is None:
        return {}
    s = d.summary()
    lines = ["Distilled router: the LM router's decisions learnt by a calibrated classifier.",
             f"features: {s['features']}", f"slots it chooses between: {s['classes']} (0 = fallback)",
             f"threshold: {d.threshold:.4f} (below it the LM router decides)",
             f"bound to library {d.binding.library_hash[:12]} and input fields {list(d.binding.input_names)}"]
    if d.training:
        lines.append("training: " + visible_controls(json.dumps({k: d.training.get(k) for k in (
            "requests", "labels", "chosen", "heldout", "candidates")}, sort_keys=True)))
    return {"distilled_router.json": d.to_json(indent=1) + "\n", "distilled_router.txt": "\n".join(lines) + "\n"}


__all__ = ["STATE_KEY", "DistilledServing", "binding_of", "export_files", "parse"]
