"""The search's progress bar: the budget in scored calls, each call shown as it completes, with the best validation
mean, the archive's size and the USD spent (nothing for unpriced local or scripted models).

Its time estimate is the whole run's average pace (`smoothing=0`: time since the bar opened over calls made), so
the reflection, repairs and merges between scored calls count, not only the calls themselves. Past the budget (the
last iteration finishing) the bar keeps its percentage: its total grows to the count and it says by how much the
budget was exceeded."""

from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm


class SearchProgress:
    """A tqdm bar over the budget, or nothing (`enabled=False`). `tick` is thread-safe (tqdm's own lock)."""

    def __init__(self, enabled: bool = True, desc: str = "Adaptive-GEPA"):
        self.enabled, self.desc = enabled, desc
        self.budget = 0
        self._bar: Any = None

    def open(self, total: int, initial: int) -> None:
        self.budget = total
        self._bar = tqdm(total=max(total, initial), desc=self.desc, unit="call", disable=not self.enabled,
                         initial=initial, smoothing=0)
        if initial > total:                  # a resumed run already past its budget (the last iteration's overshoot)
            self._bar.total = total
            self._fit(self._bar, initial)

    def tick(self, n: int = 1) -> None:
        """`n` scored calls completed."""
        bar = self._bar
        if bar is not None:
            self._fit(bar, bar.n + n)
            bar.update(n)

    def _fit(self, bar: Any, count: int) -> None:
        """Past the budget: grow the total to the count (the percentage stays) and say by how much."""
        if bar.total is not None and count > bar.total:
            bar.total = count
            bar.set_description_str(f"{self.desc} (budget {self.budget} exceeded by {count - self.budget}: the "
                                    "last iteration finishes)", refresh=False)

    def note(self, text: str) -> None:
        bar = self._bar
        if bar is not None:
            bar.set_postfix_str(text)

    def show(self, spent: int, *, best: float, archive: int, cost: float | None) -> None:
        """The count after a folded proposal, with the best mean, the archive size and the USD spent (None:
        unpriced, not shown)."""
        bar = self._bar
        if bar is not None:
            self._fit(bar, spent)
            bar.n = spent
            post = {"best": f"{best:.3f}", "archive": archive}
            if cost is not None:
                post["cost"] = f"${cost:.4f}"
            bar.set_postfix(post)
            bar.refresh()

    def close(self) -> None:
        bar, self._bar = self._bar, None
        if bar is not None:
            bar.close()
