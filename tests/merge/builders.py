"""Synthetic libraries, parents and footprints for the merge tests (programs are never executed)."""

from __future__ import annotations

from dspy_adaptive.merge import ParentView
from dspy_adaptive.program.library import Library, Slot


def spec(role: str, version: str = "v0", profile: str = "fast") -> Slot:
    return Slot().activated(f"Handles {role} requests.",
                            f"class {role.title().replace(' ', '')}{version}(dspy.Module): ...", profile)


def lib(*slots: Slot | None, k: int = 5, router: str = "route by description") -> Library:
    full = [s if s is not None else Slot() for s in slots] + [Slot()] * (k - len(slots))
    return Library(router=router, slots=tuple(full))


def rows(prefix: str, lo: int, hi: int) -> frozenset[str]:
    """Row ids prefix{lo}..prefix{hi-1}."""
    return frozenset(f"{prefix}{n}" for n in range(lo, hi))


def view(library: Library, val_mean: float, fp=None, scores=None) -> ParentView:
    return ParentView(library=library, val_mean=val_mean, footprints=fp, row_scores=scores or {})


def const_scores(row_set, value: float) -> dict[str, float]:
    return dict.fromkeys(row_set, value)
