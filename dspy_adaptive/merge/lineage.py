"""Merge eligibility and pair finding, GEPA-style (gepa.proposer.merge.find_common_ancestor_pair).

A pair (a, b) is eligible with ancestor c if c is a common ancestor, neither parent is an ancestor of
the other, c's validation mean is not higher than either parent's, and some component (router or a slot
unit, by index) differs between the parents and equals the ancestor's in one of them (GEPA's
`does_triplet_have_desirable_predictors`, reused on a component-dict view of the libraries).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from gepa.proposer.merge import does_triplet_have_desirable_predictors

from dspy_adaptive.program.library import Library
from dspy_adaptive.schema import ancestors


@dataclass(frozen=True)
class LineageNode:
    index: int
    parents: tuple[int, ...]
    library: Library
    val_mean: float


@dataclass(frozen=True)
class MergePair:
    base: int        # higher validation mean (ties -> lower index)
    other: int
    ancestor: int

    @property
    def key(self) -> frozenset[int]:
        return frozenset((self.base, self.other))

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base, "other": self.other, "ancestor": self.ancestor}


def components(library: Library) -> dict[str, str]:
    """The merge components as GEPA sees them: name -> canonical text (router, slot_1..slot_K)."""
    comps = {"router": library.router}
    for k, s in library.items():
        comps[f"slot_{k}"] = repr((s.description, s.program_source, s.profile, s.active))
    return comps


def has_desirable_component(ancestor: Library, a: Library, b: Library) -> bool:
    if not ancestor.max_specialists == a.max_specialists == b.max_specialists:
        return False
    return does_triplet_have_desirable_predictors([components(ancestor), components(a), components(b)], 0, 1, 2)


ComponentCheck = Callable[[LineageNode, LineageNode, LineageNode], bool]


def _index_check(ancestor: LineageNode, a: LineageNode, b: LineageNode) -> bool:
    return has_desirable_component(ancestor.library, a.library, b.library)


def eligible_pairs(nodes: Sequence[LineageNode], tried: set[frozenset] | None = None,
                   candidates: Sequence[int] | None = None,
                   pair_filter: Callable[[int, int], bool] | None = None,
                   component_check: ComponentCheck | None = None) -> list[tuple[int, int, tuple[int, ...]]]:
    """Every eligible (a, b, ancestors) with a < b, in index order; ancestors sorted.

    `component_check(ancestor, a, b)` decides "some component differs and matches the ancestor in one
    parent"; the default compares by slot index (GEPA). The search passes an alignment-aware check (the
    paper applies the usual check after aligning the weaker parent to the base layout)."""
    check = component_check or _index_check
    by_index = {n.index: n for n in nodes}
    pool = sorted(set(candidates) if candidates is not None else by_index)
    pool = [i for i in pool if i in by_index]
    tried = tried or set()
    parents = {i: n.parents for i, n in by_index.items()}
    anc = {i: ancestors(parents, i) for i in pool}
    out = []
    for x, a in enumerate(pool):
        for b in pool[x + 1:]:
            if frozenset((a, b)) in tried or a in anc[b] or b in anc[a]:
                continue
            if pair_filter is not None and not pair_filter(a, b):
                continue
            na, nb = by_index[a], by_index[b]
            good = tuple(c for c in sorted(anc[a] & anc[b]) if c in by_index
                         and by_index[c].val_mean <= na.val_mean and by_index[c].val_mean <= nb.val_mean
                         and check(by_index[c], na, nb))
            if good:
                out.append((a, b, good))
    return out


def find_merge_pair(nodes: Sequence[LineageNode], rng: random.Random, tried: set[frozenset],
                    candidates: Sequence[int] | None = None,
                    pair_filter: Callable[[int, int], bool] | None = None,
                    component_check: ComponentCheck | None = None) -> MergePair | None:
    """Draw one eligible pair (uniformly, via `rng`) among `candidates` (default: all nodes; the engine
    passes GEPA's Pareto-frontier dominators) and a common ancestor for it, weighted by validation mean
    as in GEPA (non-positive means get weight 0; all zero -> uniform). Pairs whose frozenset({a, b}) is
    in `tried` are skipped. `pair_filter(a, b)` can veto a pair (e.g. too few shared validation rows).
    Returns None if no eligible pair exists.
    """
    pairs = eligible_pairs(nodes, tried, candidates, pair_filter, component_check)
    if not pairs:
        return None
    by_index = {n.index: n for n in nodes}
    a, b, ancs = pairs[rng.randrange(len(pairs))]
    weights = [max(by_index[c].val_mean, 0.0) for c in ancs]
    c = rng.choices(ancs, weights=weights)[0] if sum(weights) > 0 else ancs[rng.randrange(len(ancs))]
    ma, mb = by_index[a].val_mean, by_index[b].val_mean
    base, other = (a, b) if ma >= mb else (b, a)
    return MergePair(base=base, other=other, ancestor=c)
