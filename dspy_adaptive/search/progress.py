"""The search's progress bar: the budget in scored calls, each call shown as it completes (past the total: the
last iteration's overshoot), with the best validation mean, the archive's size and the USD spent."""

from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm


class SearchProgress:
    """A tqdm bar over the budget, or nothing (`enabled=False`). `tick` is thread-safe (tqdm's own lock)."""

    def __init__(self, enabled: bool = True, desc: str = "Adaptive-GEPA"):
        self.enabled, self.desc = enabled, desc
        self._bar: Any = None

    def open(self, total: int, initial: int) -> None:
        self._bar = tqdm(total=total, desc=self.desc, unit="call", disable=not self.enabled, initial=initial)

    def tick(self, n: int = 1) -> None:
        """`n` scored calls completed."""
        bar = self._bar
        if bar is not None:
            bar.update(n)

    def note(self, text: str) -> None:
        bar = self._bar
        if bar is not None:
            bar.set_postfix_str(text)

    def show(self, spent: int, *, best: float, archive: int, cost: float) -> None:
        bar = self._bar
        if bar is not None:
            bar.n = spent
            bar.set_postfix(best=f"{best:.3f}", archive=archive, cost=f"${cost:.4f}")
            bar.refresh()

    def close(self) -> None:
        bar, self._bar = self._bar, None
        if bar is not None:
            bar.close()
