"""LM usage per role (router, specialist, fallback, reflection, metric), read from DSPy's usage hook.

DSPy's LM layer calls `settings.usage_tracker.add_usage(model, usage)` after every uncached call.
`role(name)` installs a tiny tracker that files that usage under `name` in the active `UsageMeter`;
with no meter active it does nothing, so RoutedProgram outside a search pays nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections import defaultdict
from typing import Any, Iterator

import dspy

_meter: contextvars.ContextVar["UsageMeter | None"] = contextvars.ContextVar("adaptive_usage_meter", default=None)

class UsageMeter:
    """Thread-safe counters: calls, prompt/completion tokens and cost per role."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_role: dict[str, dict[str, float]] = defaultdict(
            lambda: {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0})

    def add(self, role_name: str, usage: dict[str, Any]) -> None:
        with self._lock:
            entry = self._by_role[role_name]
            entry["calls"] += 1
            entry["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
            entry["completion_tokens"] += int(usage.get("completion_tokens") or 0)
            entry["cost"] += float(usage.get("cost") or 0.0)

    def restore(self, counts: dict[str, dict[str, float]]) -> None:
        """Counters from a checkpoint (resume)."""
        with self._lock:
            for role_name, c in counts.items():
                self._by_role[role_name].update(c)

    def snapshot(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {r: dict(v) for r, v in sorted(self._by_role.items())}

    @contextlib.contextmanager
    def active(self) -> Iterator["UsageMeter"]:
        token = _meter.set(self)
        try:
            yield self
        finally:
            _meter.reset(token)


class _RoleTracker:
    def __init__(self, meter: UsageMeter, role_name: str):
        self.meter, self.role_name = meter, role_name

    def add_usage(self, lm: str, usage_entry: dict[str, Any]) -> None:
        self.meter.add(self.role_name, usage_entry or {})

    def __deepcopy__(self, memo):  # dspy may deep-copy trackers across threads; keep ours shared
        return self


@contextlib.contextmanager
def role(role_name: str) -> Iterator[None]:
    """File LM usage inside this block under `role_name` (no-op without an active meter)."""
    meter = _meter.get()
    if meter is None:
        yield
        return
    with dspy.context(usage_tracker=_RoleTracker(meter, role_name)):
        yield
