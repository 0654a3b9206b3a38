"""The recorded schedule of a search: each sequential step (an evaluation batch or a reflection call)
with its size, its depth (sequential LM calls per row) and its wall-clock span. benchmarks/perf.py
computes from it the critical-path ideal (sum over steps of ceil(rows / threads) x depth x latency) and the
overlap bound (the steps' own durations over k)."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Step:
    kind: str
    rows: int
    depth: int
    start: float
    end: float


class Schedule:
    def __init__(self) -> None:
        self._steps: list[Step] = []
        self._lock = threading.Lock()
        self.origin = time.perf_counter()

    def record(self, kind: str, rows: int, depth: int, start: float, end: float) -> None:
        with self._lock:
            self._steps.append(Step(kind, rows, max(depth, 1), start - self.origin, end - self.origin))

    def restore(self, steps: list[dict]) -> None:
        """Continue a resumed run's schedule: its earlier steps are kept and new steps follow its last one
        (the time between the sessions is left out)."""
        with self._lock:
            self._steps = [Step(**s) for s in steps]
            last = max((s.end for s in self._steps), default=0.0)
            self.origin = time.perf_counter() - last

    def steps(self) -> list[Step]:
        with self._lock:
            return list(self._steps)

    def to_list(self) -> list[dict]:
        return [asdict(s) for s in self.steps()]


def critical_path(steps: list[Step] | list[dict], threads: int, latency: float) -> float:
    """Sum over sequential steps of ceil(rows / threads) x depth x latency (seconds)."""
    total = 0.0
    for s in steps:
        rows, depth = (s.rows, s.depth) if isinstance(s, Step) else (s["rows"], s["depth"])
        total += math.ceil(rows / threads) * depth * latency
    return total


def overlap_bound(steps: list[Step] | list[dict], k: int) -> float:
    """The sum of the steps' own wall-clock durations over k (seconds): a proposal runs its steps one after
    another and at most k run at once (start order), so with these steps at these durations no schedule
    finishes sooner. Between it and the run's wall time is what scheduling could still win; beyond it, only
    shorter steps (fewer sequential LM round trips per proposal) help."""
    total = 0.0
    for s in steps:
        start, end = (s.start, s.end) if isinstance(s, Step) else (s["start"], s["end"])
        total += max(0.0, end - start)
    return total / max(k, 1)
