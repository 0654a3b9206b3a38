"""The merge check (paper Appendix A.1 "Two acceptance checks")."""

from __future__ import annotations

import random
from typing import Mapping


def select_gate_rows(scores_a: Mapping[str, float], scores_b: Mapping[str, float], rng: random.Random,
                     n: int = 5) -> tuple[str, ...]:
    """Up to `n` rows both parents were scored on, drawn round-robin from three buckets: rows favouring
    a, rows favouring b, ties (each bucket shuffled by `rng`; sorted first, so the draw depends only on
    the seed, not on dict or set order). Fewer rows if fewer shared rows exist; never repeats a row."""
    shared = sorted(set(scores_a) & set(scores_b))
    buckets = [[r for r in shared if scores_a[r] > scores_b[r]],
               [r for r in shared if scores_b[r] > scores_a[r]],
               [r for r in shared if scores_a[r] == scores_b[r]]]
    for bucket in buckets:
        rng.shuffle(bucket)
    out: list[str] = []
    while len(out) < n and any(buckets):
        for bucket in buckets:
            if bucket and len(out) < n:
                out.append(bucket.pop(0))
    return tuple(out)


def gate_passes(child_sum: float, sum_a: float, sum_b: float) -> bool:
    """A merged child must match or beat the stronger parent's sum on the gate rows."""
    return child_sum >= max(sum_a, sum_b)
