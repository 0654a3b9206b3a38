"""The budget: scored calls (one program run on one example plus its metric), counted by kind, and an
optional USD limit on the LM cost of every role (read from the run's cost ledger)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from dspy_adaptive.schema import BUDGET_KINDS as KINDS
from dspy_adaptive.schema import BudgetKind


@dataclass(frozen=True)
class BudgetReport:
    max_calls: int
    spent: int
    by_kind: dict[str, int]

    @property
    def overshoot(self) -> int:
        return max(0, self.spent - self.max_calls)


class Budget:
    """Thread-safe counter. Iterations start only while `spent < max_calls` (and, with `max_cost_usd`, while
    `cost() < max_cost_usd`); evaluations in flight finish."""

    def __init__(self, max_calls: int, *, max_cost_usd: float | None = None, cost: Callable[[], float] | None = None):
        self.max_calls = max_calls
        self.max_cost_usd = max_cost_usd
        self.cost = cost or (lambda: 0.0)
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
        return self.stop_reason() is None

    def stop_reason(self) -> str | None:
        """Why no new iteration may start (None: one may)."""
        if self.spent >= self.max_calls:
            return "budget exhausted"
        return self.cost_stop_reason()

    def cost_stop_reason(self) -> str | None:
        """The cost limit's part of `stop_reason` (None: not set, or not reached)."""
        if self.max_cost_usd is not None:
            cost = self.cost()
            if cost >= self.max_cost_usd:
                return f"cost limit reached (${cost:.4f} of ${self.max_cost_usd:g})"
        return None

    def report(self) -> BudgetReport:
        with self._lock:
            return BudgetReport(self.max_calls, sum(self._by_kind.values()), dict(self._by_kind))
