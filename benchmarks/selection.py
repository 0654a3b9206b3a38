"""A fresh selection split, against selection optimism (the paper's own named limit).

The search picks its best candidate on the same validation set that reports its score, so the reported
validation score is optimistic. With `--selection-split N`, N requests per family are held apart from
validation before the search (the search never sees them). After the search, the top `--finalists`
candidates by validation mean are re-scored there, `--selection-rollouts` times each (with the LM's response
cache off when R > 1, for noisy programs and judges), and the candidate with the best mean is the
*selection pick*. Both picks -- validation's and the fresh split's -- are scored on test and reported side
by side in results.json (`selection`) and tables.md.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence


def carve(val: Sequence[Any], per_family: int, seed: int) -> tuple[list[Any], list[Any]]:
    """(validation, selection): `per_family` requests of each family moved out of `val` (chosen by `seed`)."""
    rng = random.Random(f"selection:{seed}")
    by_family: dict[str, list[Any]] = {}
    for ex in val:
        by_family.setdefault(str(ex.get("family")), []).append(ex)
    chosen: set[str] = set()
    for rows in by_family.values():
        if len(rows) <= per_family:
            raise ValueError(f"--selection-split {per_family}: family {rows[0].get('family')} has only {len(rows)} "
                             "validation rows; leave at least one for validation")
        chosen |= {str(ex.get("id")) for ex in rng.sample(rows, per_family)}
    return [ex for ex in val if str(ex.get("id")) not in chosen], [ex for ex in val if str(ex.get("id")) in chosen]


def finalists(val_means: Sequence[float], n: int) -> list[int]:
    """The top-n candidate indices by validation mean (ties: the earlier candidate first)."""
    return sorted(range(len(val_means)), key=lambda i: (-val_means[i], i))[:max(1, n)]


@dataclass(frozen=True)
class SelectionResult:
    finalists: list[int]
    validation_means: list[float]
    selection_means: list[float]         # per finalist: the mean over the selection rows and rollouts
    validation_pick: int
    selection_pick: int
    rollouts: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def select(val_means: Sequence[float], n: int, rollouts: int,
           score: Callable[[int, int], Sequence[float]]) -> SelectionResult:
    """Re-score the top-n candidates by validation mean with `score(candidate, rollout) -> row scores` and
    pick the best mean (ties: the better validation candidate)."""
    tops = finalists(val_means, n)
    means = []
    for idx in tops:
        scores = [s for r in range(max(1, rollouts)) for s in score(idx, r)]
        means.append(sum(scores) / len(scores) if scores else float("-inf"))
    best = max(range(len(tops)), key=lambda j: (means[j], -j))
    return SelectionResult(tops, [float(val_means[i]) for i in tops], means, tops[0], tops[best], max(1, rollouts))
