"""Specialist alignment of the weaker parent to the base layout (paper §3.3 Eq. 7, Appendix A.2).

1. Initial pairs: mutual best matches with J > 0 (each side's argmax, ties -> lower slot index), or
   with `method="hungarian"` a maximum-weight assignment over J (scipy), keeping only pairs with J > 0.
2. The other parent's unmatched active specialists, largest footprint first (ties -> lower index):
   its own index if that slot is free in the base layout (inactive in the base and not yet assigned),
   else the lowest free slot, else it *competes* with its strongest positive-overlap base specialist
   that is not already matched or competing (ties -> lower index), else it is dropped. Capacity stays K_max.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from dspy_adaptive.merge.footprints import JaccardMatrix, jaccard_matrix

METHODS = ("mutual_best", "hungarian")


@dataclass(frozen=True)
class Alignment:
    method: str
    matched: tuple[tuple[int, int], ...]      # (base_slot, other_slot): paired, target = base_slot
    placed: tuple[tuple[int, int], ...]       # (other_slot, target_slot): copied into a free slot
    competing: tuple[tuple[int, int], ...]    # (base_slot, other_slot): capacity fallback, target = base_slot
    dropped: tuple[int, ...]                  # other slots left out of the child
    targets: tuple[tuple[int, int], ...]      # (other_slot, target_slot) for matched, placed and competing

    @property
    def mapping(self) -> dict[int, int]:
        """other_slot -> target slot in the base layout."""
        return dict(self.targets)

    def target(self, other_slot: int) -> int | None:
        return self.mapping.get(other_slot)

    @property
    def preserves_indices(self) -> bool:
        """Every imported specialist keeps its own index and none is dropped."""
        return not self.dropped and all(j == t for j, t in self.targets)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "matched": [list(p) for p in self.matched],
                "placed": [list(p) for p in self.placed], "competing": [list(p) for p in self.competing],
                "dropped": list(self.dropped), "mapping": {str(j): t for j, t in self.targets}}


def _argmax_lowest(values: Iterable[tuple[int, float]]) -> tuple[int | None, float]:
    best, best_v = None, -1.0
    for k, v in sorted(values):
        if v > best_v:
            best, best_v = k, v
    return best, best_v


def _mutual_best(jm: JaccardMatrix) -> list[tuple[int, int]]:
    pairs = []
    for i in jm.rows:
        j, v = _argmax_lowest((j, jm.get(i, j)) for j in jm.cols)
        if j is None or v <= 0:
            continue
        i_back, _ = _argmax_lowest((i2, jm.get(i2, j)) for i2 in jm.rows)
        if i_back == i:
            pairs.append((i, j))
    return pairs


def _hungarian(jm: JaccardMatrix) -> list[tuple[int, int]]:
    if not jm.rows or not jm.cols:
        return []
    import numpy as np  # imported here: ~50 MB that only this method needs
    from scipy.optimize import linear_sum_assignment

    weights = np.array(jm.values, dtype=float)
    r, c = linear_sum_assignment(weights, maximize=True)
    return sorted((jm.rows[a], jm.cols[b]) for a, b in zip(r, c) if weights[a, b] > 0)


def align(base_fp: Mapping[int, frozenset[str]], other_fp: Mapping[int, frozenset[str]], *,
          max_specialists: int, base_active: Iterable[int], other_active: Iterable[int],
          method: str = "mutual_best") -> Alignment:
    """Align the other parent's active specialists to the base layout.

    Only active slots take part; an active slot without a footprint entry counts as an empty footprint
    (it can still be placed into a free slot, never matched).
    """
    if method not in METHODS:
        raise ValueError(f"alignment method must be one of {METHODS}, got {method!r}")
    base_active = sorted(set(base_active))
    other_active = sorted(set(other_active))
    for k in (*base_active, *other_active):
        if not 1 <= k <= max_specialists:
            raise ValueError(f"slot {k} outside 1..{max_specialists}")
    fa = {i: frozenset(base_fp.get(i, frozenset())) for i in base_active}
    fb = {j: frozenset(other_fp.get(j, frozenset())) for j in other_active}
    jm = jaccard_matrix(fa, fb)

    matched = _mutual_best(jm) if method == "mutual_best" else _hungarian(jm)
    taken_base = {i for i, _ in matched}                    # base specialists already paired
    targets: dict[int, int] = {j: i for i, j in matched}
    occupied = set(base_active) | set(targets.values())
    placed, competing, dropped = [], [], []

    unmatched = sorted((j for j in other_active if j not in targets), key=lambda j: (-len(fb[j]), j))
    for j in unmatched:
        free = [k for k in range(1, max_specialists + 1) if k not in occupied]
        if j in free:
            t = j
        elif free:
            t = free[0]
        else:
            t = None
        if t is not None:
            placed.append((j, t))
            targets[j] = t
            occupied.add(t)
            continue
        i, v = _argmax_lowest((i, jm.get(i, j)) for i in base_active if i not in taken_base)
        if i is not None and v > 0:
            competing.append((i, j))
            taken_base.add(i)
            targets[j] = i
        else:
            dropped.append(j)

    return Alignment(method=method, matched=tuple(sorted(matched)), placed=tuple(placed),
                     competing=tuple(competing), dropped=tuple(dropped),
                     targets=tuple(sorted(targets.items())))
