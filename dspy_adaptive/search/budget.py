"""The budget: scored calls (one program run on one example plus its metric), counted by kind."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from dspy_adaptive.records import BUDGET_KINDS as KINDS
from dspy_adaptive.records import BudgetKind


@dataclass(frozen=True)
class BudgetReport:
    max_calls: int
    spent: int
    by_kind: dict[str, int]

    @property
    def overshoot(self) -> int:
        return max(0, self.spent - self.max_calls)


class Budget:
    """Thread-safe counter. Iterations start only while `spent < max_calls`; evaluations in flight finish."""

    def __init__(self, max_calls: int):
        self.max_calls = max_calls
        self._by_kind = dict.fromkeys(KINDS, 0)
        self._lock = threading.Lock()

    def restore(self, by_kind: dict[str, int]) -> None:
        """Counts from a checkpoint (resume)."""
        with self._lock:
            self._by_kind.update(by_kind)

    def charge(self, kind: BudgetKind, n: int = 1) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown budget kind {kind!r}")
        with self._lock:
            self._by_kind[kind] += n

    @property
    def spent(self) -> int:
        with self._lock:
            return sum(self._by_kind.values())

    def can_start(self) -> bool:
        return self.spent < self.max_calls

    def report(self) -> BudgetReport:
        with self._lock:
            return BudgetReport(self.max_calls, sum(self._by_kind.values()), dict(self._by_kind))
