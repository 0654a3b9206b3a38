"""The overlap bound benchmarks.perf reports: a run's own step durations, overlapped perfectly k at a time."""

from __future__ import annotations

import pytest

from dspy_adaptive.search.schedule import Schedule, Step, critical_path, overlap_bound


def test_the_overlap_bound_is_the_steps_durations_over_k():
    steps = [Step("parent_minibatch", 3, 1, 0.0, 0.05), Step("reflection", 1, 1, 0.05, 0.10),
             Step("validation", 30, 2, 0.10, 0.30)]
    assert overlap_bound(steps, 1) == pytest.approx(0.30)
    assert overlap_bound(steps, 4) == pytest.approx(0.075)
    assert overlap_bound([s.__dict__ for s in steps], 4) == pytest.approx(0.075)   # the record's dict form
    assert overlap_bound([], 4) == 0.0
    assert overlap_bound(steps, 0) == pytest.approx(0.30)                          # k < 1 reads as sequential


def test_the_bound_reads_a_recorded_schedule_and_differs_from_the_latency_ideal():
    sched = Schedule()
    o = sched.origin
    sched.record("parent_minibatch", 3, 1, o + 0.0, o + 0.06)
    sched.record("child_minibatch", 3, 2, o + 0.06, o + 0.20)
    steps = sched.to_list()
    assert overlap_bound(steps, 2) == pytest.approx(0.10)
    assert critical_path(steps, 16, 0.05) == pytest.approx(0.15)    # 1 x 1 x 50 ms + 1 x 2 x 50 ms
