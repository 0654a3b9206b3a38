"""The distilled router inside a RoutedProgram: binding, serving, saving. (RoutedProgram calls these hooks.)

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

#: a dspy_adaptive.routed_program.RoutedProgram (not imported: it imports this package)
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


def mismatch(routed: "RoutedProgram", d: DistilledRouter) -> str | None:
    """Why `d` does not serve `routed` any more (None: it does)."""
    lib = routed.library
    if routed.__dict__.get("_distilled_library") is not lib:
        if lib.content_hash != d.binding.library_hash:
            return (f"the library changed (distilled for {d.binding.library_hash[:12]}, now "
                    f"{lib.content_hash[:12]})")
        routed.__dict__["_distilled_library"] = lib
    if router_hash(routed.router.demos) != d.binding.router_hash:
        return "the router predictor's demos changed"
    if routed.input_names and tuple(routed.input_names) != d.binding.input_names:
        return f"the input fields changed ({list(d.binding.input_names)} -> {list(routed.input_names)})"
    if d.features.kind == "embedding" and not is_available(d.features.embedder):
        return f"its text embedder {d.features.embedder!r} is not available here"
    return None


def drop(routed: "RoutedProgram", why: str) -> None:
    routed.__dict__["_distilled"] = None
    routed.__dict__.pop("_distilled_library", None)
    log.warning("dropped the distilled router: %s; the LM router decides every request. Distill again with "
                "routed.distill_router(requests).", why)


def current(routed: "RoutedProgram") -> DistilledRouter | None:
    """The program's distilled router if it still serves the program (otherwise it is dropped here)."""
    d = routed.__dict__.get("_distilled")
    if d is None:
        return None
    why = mismatch(routed, d)
    if why is not None:
        drop(routed, why)
        return None
    return d


def attach(routed: "RoutedProgram", d: DistilledRouter | None) -> None:
    """Serve `routed` with `d` (None: the LM router only); `DistilledRouterError` if `d` is for another program."""
    if d is None:
        routed.__dict__["_distilled"] = None
        return
    if not isinstance(d, DistilledRouter):
        raise TypeError(f"expected a DistilledRouter, got {type(d).__name__}")
    routed.__dict__.pop("_distilled_library", None)
    why = mismatch(routed, d)
    if why is not None:
        raise DistilledRouterError(f"this distilled router does not serve this program: {why}")
    routed.__dict__["_distilled"] = d


def decide(routed: "RoutedProgram", inputs: Mapping[str, Any]) -> Decision | None:
    """The distilled router's decision for a request, or None when there is none (or it failed: the LM router
    then decides, and the failure is logged)."""
    d = current(routed)
    if d is None:
        return None
    try:
        return d.decide(inputs)
    except Exception as e:  # noqa: BLE001 - never worse than the LM router: it decides instead
        log.warning("the distilled router failed on a request (%s: %s); the LM router decided it",
                    type(e).__name__, str(e)[:200])
        return None


# -- persistence --------------------------------------------------------------------------------------------

def dump(routed: "RoutedProgram") -> dict[str, Any] | None:
    d = current(routed)
    return d.to_dict() if d is not None else None


def parse(state: Mapping[str, Any]) -> DistilledRouter | None:
    """The saved distilled router of a program state, checked (raises `DistilledRouterError`), or None."""
    data = state.get(STATE_KEY)
    return None if data is None else DistilledRouter.from_dict(data)


def restore(routed: "RoutedProgram", d: DistilledRouter | None) -> None:
    """After a state is loaded: serve with its distilled router if it is for this program, else drop it."""
    routed.__dict__["_distilled"] = None
    routed.__dict__.pop("_distilled_library", None)
    if d is None:
        return
    routed.__dict__["_distilled"] = d
    why = mismatch(routed, d)
    if why is not None:
        drop(routed, f"the saved one is not for this program: {why}")


def export_files(routed: "RoutedProgram") -> dict[str, str]:
    """distilled_router.json (the data) and distilled_router.txt (for people) when there is one."""
    import json

    from dspy_adaptive.untrusted import visible_controls

    d = current(routed)
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


__all__ = ["STATE_KEY", "attach", "binding_of", "current", "decide", "drop", "dump", "export_files", "mismatch",
           "parse", "restore"]
