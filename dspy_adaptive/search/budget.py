"""The budget and the search's one stop rule.

Scored calls (one program run on one example plus its metric) are counted by kind; an optional USD limit
reads the run's cost ledger; an optional candidate cap (the paper's 100) stops once the archive is full; an
idle limit stops a search that keeps starting iterations which spend nothing. `stop_reason()` is the only
place that decides whether another iteration may start.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from dspy_adaptive import checks
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
    """Thread-safe counter and stop rule. Iterations start only while the spent count is below `max_calls`,
    the cost (with `max_cost_usd`) below its limit, and fewer than `max_idle_iterations` iterations in a row
    spent nothing; evaluations in flight finish."""

    def __init__(self, max_calls: int, *, max_cost_usd: float | None = None, cost: Callable[[], float] | None = None,
                 max_idle_iterations: int | None = None, max_candidates: int | None = None):
        checks.integer("max_metric_calls", max_calls)
        checks.integer("max_candidates", max_candidates, minimum=2, optional=True, none_means="no cap")
        checks.positive_number("max_cost_usd", max_cost_usd, optional=True, unit="US dollars")
        checks.integer("max_idle_iterations", max_idle_iterations, optional=True)
        self.max_calls = max_calls
        self.max_cost_usd = max_cost_usd
        self.max_idle_iterations = max_idle_iterations
        self.max_candidates = max_candidates
        self.cost = cost or (lambda: 0.0)
        self.idle_iterations = 0          # consecutive finished iterations that spent no scored call
        self._by_kind = dict.fromkeys(KINDS, 0)
        self._lock = threading.Lock()

    def restore(self, by_kind: dict[str, int], idle_iterations: int = 0) -> None:
        """Counts from a checkpoint (resume)."""
        with self._lock:
            self._by_kind.update(by_kind)
            self.idle_iterations = idle_iterations

    def charge(self, kind: BudgetKind, n: int = 1) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown budget kind {kind!r}")
        with self._lock:
            self._by_kind[kind] += n

    @property
    def spent(self) -> int:
        with self._lock:
            return sum(self._by_kind.values())

    def iteration_finished(self, spent_before: int, spent_after: int) -> None:
        """An iteration finished having moved the count from `spent_before` to `spent_after` (the idle rule)."""
        self.idle_iterations = 0 if spent_after > spent_before else self.idle_iterations + 1

    def can_start(self, spent: int | None = None, candidates: int = 0) -> bool:
        return self.stop_reason(spent, candidates) is None

    def stop_reason(self, spent: int | None = None, candidates: int = 0) -> str | None:
        """Why no new iteration may start (None: one may). `spent`: the count to judge by when it is not every
        call charged so far (ordered concurrency judges by the calls of folded work only); `candidates`: how many
        the archive holds (the paper's candidate budget, `max_candidates`)."""
        if (self.spent if spent is None else spent) >= self.max_calls:
            return "budget exhausted"
        if self.max_candidates is not None and candidates >= self.max_candidates:
            return f"candidate cap reached: {candidates} candidates (max_candidates)"
        if self.max_cost_usd is not None:
            cost = self.cost()
            if cost >= self.max_cost_usd:
                return f"cost limit reached (${cost:.4f} of ${self.max_cost_usd:g})"
        if self.max_idle_iterations is not None and self.idle_iterations >= self.max_idle_iterations:
            return (f"stalled: {self.idle_iterations} iterations in a row spent no budget (parents perfect on "
                    "their cached minibatches, or every reflection rejected)")
        return None

    def report(self) -> BudgetReport:
        with self._lock:
            return BudgetReport(self.max_calls, sum(self._by_kind.values()), dict(self._by_kind))
