"""Select step: which archived candidate to improve next (one small Protocol; gepa's four strategies).

The Pareto strategies read the archive's frontier of the run's `frontier_type` (gepa's instance, objective,
hybrid or cartesian frontier: `search.frontier`), as gepa's selectors read `state.get_pareto_front_mapping()`."""

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
    """GEPA's rule: drop dominated candidates from the frontier's best sets, sample by frequency."""

    pushed_out = "left the Pareto front"

    def select(self, archive: Archive, rng: random.Random) -> int:
        scores = [c.val_mean for c in archive.candidates]
        return select_program_candidate_from_pareto_front(archive.frontier(), scores, rng)

    def selectable(self, archive: Archive) -> set[int]:
        scores = [c.val_mean for c in archive.candidates]
        fronts = remove_dominated_programs(archive.frontier(), scores=scores)
        return set().union(*fronts.values()) if fronts else set()


class CurrentBestSelector:
    """Always the highest validation mean (dspy.GEPA's candidate_selection_strategy='current_best')."""

    pushed_out = "is no longer the best candidate"

    def select(self, archive: Archive, rng: random.Random) -> int:
        return archive.best_index()

    def selectable(self, archive: Archive) -> set[int]:
        return {archive.best_index()}


class EpsilonGreedySelector:
    """gepa's 'epsilon_greedy' (dspy.GEPA passes it through): with probability epsilon (0.1) a uniformly random
    archived candidate, otherwise the highest validation mean."""

    pushed_out = "is no longer the best candidate"

    def __init__(self, epsilon: float = 0.1):
        self.epsilon = epsilon

    def select(self, archive: Archive, rng: random.Random) -> int:
        if rng.random() < self.epsilon:
            return rng.randint(0, len(archive) - 1)
        return archive.best_index()

    def selectable(self, archive: Archive) -> set[int]:
        return set(range(len(archive)))   # any candidate can be drawn: a proposal never goes stale


class TopKParetoSelector:
    """gepa's 'top_k_pareto': Pareto selection restricted to the k (5) highest validation means."""

    pushed_out = "left the top-k Pareto front"

    def __init__(self, k: int = 5):
        self.k = k

    def _fronts(self, archive: Archive) -> tuple[dict[str, set[int]], list[float]]:
        scores = [c.val_mean for c in archive.candidates]
        top = set(sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)[: self.k])
        fronts = {rid: front & top for rid, front in archive.frontier().items() if front & top}
        return fronts, scores

    def select(self, archive: Archive, rng: random.Random) -> int:
        fronts, scores = self._fronts(archive)
        if not fronts:
            return archive.best_index()
        return select_program_candidate_from_pareto_front(fronts, scores, rng)

    def selectable(self, archive: Archive) -> set[int]:
        fronts, scores = self._fronts(archive)
        if not fronts:
            return {archive.best_index()}
        kept = remove_dominated_programs(fronts, scores=scores)
        return set().union(*kept.values()) if kept else set()


SELECTORS = {"pareto": ParetoSelector, "current_best": CurrentBestSelector, "epsilon_greedy": EpsilonGreedySelector,
             "top_k_pareto": TopKParetoSelector}


def make_selector(name: str) -> CandidateSelector:
    if name not in SELECTORS:
        raise ValueError(f"candidate_selection_strategy must be one of {sorted(SELECTORS)}, got {name!r}")
    return SELECTORS[name]()
