"""Gate step: the cheap checks a proposal must pass before paying for full validation."""

from __future__ import annotations

from typing import Sequence

from dspy_adaptive.schema import RowResult


def score_sum(results: Sequence[RowResult]) -> float:
    return float(sum(r.score for r in results))


def minibatch_gate(parent: Sequence[RowResult], child: Sequence[RowResult]) -> bool:
    """A reflected child must strictly beat its parent's sum on the same feedback minibatch."""
    return score_sum(child) > score_sum(parent)


def is_perfect(results: Sequence[RowResult], perfect_score: float) -> bool:
    return all(r.score >= perfect_score for r in results)
