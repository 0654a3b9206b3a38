"""Select step: which archived candidate to improve next (one small Protocol, two strategies)."""

from __future__ import annotations

import random
from typing import Protocol

from gepa.gepa_utils import remove_dominated_programs, select_program_candidate_from_pareto_front

from dspy_adaptive.search.archive import Archive


class CandidateSelector(Protocol):
    pushed_out: str   # how a stale proposal's record says its parent dropped out of `selectable`

    def select(self, archive: Archive, rng: random.Random) -> int: ...

    def selectable(self, archive: Archive) -> set[int]:
        """Every candidate `select` could return now (concurrent proposals stop when theirs drops out)."""
        ...


class ParetoSelector:
    """GEPA's rule: drop dominated candidates from the per-row best sets, sample by frequency."""

    pushed_out = "left the Pareto front"

    def select(self, archive: Archive, rng: random.Random) -> int:
        scores = [c.val_mean for c in archive.candidates]
        return select_program_candidate_from_pareto_front(archive.pareto_fronts(), scores, rng)

    def selectable(self, archive: Archive) -> set[int]:
        scores = [c.val_mean for c in archive.candidates]
        fronts = remove_dominated_programs(archive.pareto_fronts(), scores=scores)
        return set().union(*fronts.values()) if fronts else set()


class CurrentBestSelector:
    """Always the highest validation mean (dspy.GEPA's candidate_selection_strategy='current_best')."""

    pushed_out = "is no longer the best candidate"

    def select(self, archive: Archive, rng: random.Random) -> int:
        return archive.best_index()

    def selectable(self, archive: Archive) -> set[int]:
        return {archive.best_index()}


SELECTORS = {"pareto": ParetoSelector, "current_best": CurrentBestSelector}


def make_selector(name: str) -> CandidateSelector:
    if name not in SELECTORS:
        raise ValueError(f"candidate_selection_strategy must be one of {sorted(SELECTORS)}, got {name!r}")
    return SELECTORS[name]()
