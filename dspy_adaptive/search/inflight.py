"""Reflective proposals as jobs, and the bookkeeping of those in flight at once.

A `Job` is one started reflective proposal: its parent snapshot, its minibatch and the history it
reads. With `max_concurrent_proposals = k > 1`, `InFlight` tracks the running jobs and answers the
one question concurrency adds: is a job still worth running? A job whose parent was pushed out of
what the selector could pick now (off the Pareto front, or no longer the best) by candidates archived
since it started is *stale*: the sequential loop would not be improving that parent any more, so the
job stops at its next step, and it stops holding one of the k places at once (`doomed`).

Threads: the main loop calls `add`, `has_room`, `wait`, `doomed` and `archive_changed` (after every
archive addition); proposal threads call `stale`. They share only InFlight's own view of the archive
(its size and selectable set), never the archive itself.
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any

from dspy_adaptive.data import Row
from dspy_adaptive.schema import ProposalRecord, RowResult
from dspy_adaptive.search.archive import Archive, Candidate
from dspy_adaptive.search.select import CandidateSelector


@dataclass(frozen=True)
class Job:
    """A started reflective proposal: its parent snapshot, minibatch and the history it reads."""

    iteration: int
    parent: Candidate
    rows: tuple[Row, ...]
    history: tuple[ProposalRecord, ...]
    archive_size: int                           # candidates archived when the job started (its snapshot)


@dataclass(frozen=True)
class JobOutcome:
    job: Job
    parent_results: tuple[RowResult, ...]
    edit: Any                                   # reflection Edit, or None when reflection was skipped
    child_results: tuple[RowResult, ...] | None
    val_results: tuple[RowResult, ...] | None   # set only when the child passed the gate
    stopped: str | None = None                  # why a stale job stopped, and before which step


class InFlight:
    """The concurrent reflective proposals in flight and whether each is still worth running.

    Up to `k` live jobs run at once; a doomed job (one that will stop at its next step) no longer
    counts against them, so at most `k` more stopping jobs may still be finishing one minibatch.
    """

    def __init__(self, selector: CandidateSelector, k: int, archive: Archive):
        self.selector, self.k = selector, k
        self._jobs: dict[Future, Job] = {}
        self._lock = threading.Lock()
        self._validating: set[int] = set()     # iterations of jobs that passed their last stale check
        self._size, self._selectable = 0, frozenset()
        self.archive_changed(archive)

    # -- the main loop -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, future: Future, job: Job) -> None:
        self._jobs[future] = job

    def discard(self, future: Future) -> None:
        """A job the main loop folded itself (ordered concurrency waits on its own futures)."""
        job = self._jobs.pop(future, None)
        if job is not None:
            with self._lock:
                self._validating.discard(job.iteration)

    def has_room(self) -> bool:
        """Another job may start: fewer than k live jobs, and fewer than 2k jobs in all."""
        jobs = list(self._jobs.values())
        return len(jobs) < 2 * self.k and sum(not self.doomed(j) for j in jobs) < self.k

    def wait(self) -> list[Future]:
        """Block until at least one job finishes; the finished ones, removed, in iteration order."""
        done, _ = wait(self._jobs, return_when=FIRST_COMPLETED)
        finished = sorted(done, key=lambda f: self._jobs[f].iteration)
        with self._lock:
            for f in finished:
                self._validating.discard(self._jobs.pop(f).iteration)
        return finished

    def archive_changed(self, archive: Archive) -> None:
        """The archive grew: compute once what the selector could pick now (main thread)."""
        selectable = frozenset(self.selector.selectable(archive))
        with self._lock:
            self._size, self._selectable = len(archive), selectable

    def doomed(self, job: Job) -> bool:
        """The job's next `stale` check will stop it: it has not committed to its validation and its parent
        is pushed out (which stays so: the selectable set only loses old candidates as the archive grows)."""
        with self._lock:
            return job.iteration not in self._validating and self._pushed_out(job)

    # -- the proposal threads ----------------------------------------------------------------------------
    def stale(self, job: Job, *, committing: bool = False) -> bool:
        """True when candidates archived since the job started pushed its parent out of what the selector
        could pick now. `committing`: the check before validation; passing it commits the job to validate."""
        with self._lock:
            stale = self._pushed_out(job)
            if committing and not stale:
                self._validating.add(job.iteration)
            return stale

    def stale_reason(self, job: Job, step: str) -> str:
        """The record's reason for a job stopped before `step`, in the selector's terms."""
        return (f"parent {job.parent.index} {self.selector.pushed_out} while this proposal was in flight; "
                f"stopped {step}")

    def _pushed_out(self, job: Job) -> bool:
        return self._size != job.archive_size and job.parent.index not in self._selectable
