"""The window of reflective proposals in flight: up to k at once, k = 1 being the sequential loop.

The search loop asks the window three things: is there room for another proposal, which proposals are done
(and in what order they fold), and -- from inside a running proposal -- should it stop because its parent
was pushed out while it ran (`InFlight` answers that). Two fold orders:

* "start" (default): proposals fold in the order they started, and every decision is taken at a point fixed by
  the seed, not by thread timing. A proposal starts (and a due merge runs) only when the oldest one folds, from
  the archive, RNG and *folded* budget at that point; a running proposal decides whether it is stale only
  before its validation, after every proposal started before it has folded. With an LM whose answers depend
  only on the prompt and the paper's accounting, a seeded run ends the same at any k. Records carry the
  folded count, so they do not depend on what else was in flight.
* "completion": proposals fold as they complete, a proposal whose parent a fold pushed out stops at its next
  step and gives its place to a new one at once (a little more throughput; the run depends on thread timing).

At k = 1 a proposal runs in the calling thread (Ctrl-C stops it at once) and both orders are the sequential
loop.
"""

from __future__ import annotations

import contextvars
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from dspy_adaptive.search.archive import Archive
from dspy_adaptive.search.inflight import InFlight, Job, JobOutcome
from dspy_adaptive.search.select import CandidateSelector

RunJob = Callable[[Job, "Window"], JobOutcome]


class _Release:
    """Start order: the loop releases proposals in start order; a proposal waits for its turn before the one
    decision that depends on the archive as folded so far (staleness before validation)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._upto: float = -1

    def upto(self, iteration: int | None) -> None:
        """Proposals with iteration <= `iteration` may go on (None: all, when the loop ends)."""
        with self._cond:
            self._upto = float("inf") if iteration is None else max(self._upto, iteration)
            self._cond.notify_all()

    def wait_for(self, iteration: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._upto >= iteration)


class Window:
    """Proposals in flight (see the module docstring).

    Args:
        k: proposals in flight at once.
        fold_order: "start" or "completion".
        selector, archive: what a running proposal's parent must stay selectable in.
        folded_spent: the scored calls spent so far, when decisions and records count folded work only (start
            order with the paper's accounting); None: they count every call charged.
    """

    def __init__(self, k: int, fold_order: str, selector: CandidateSelector, archive: Archive,
                 folded_spent: int | None):
        self.k, self.fold_order = k, fold_order
        self.in_flight = InFlight(selector, k, archive)
        self.folded_spent = folded_spent
        self._release = _Release() if fold_order == "start" else None
        self._order: deque[tuple[Future, Job]] = deque()
        self._pool = ThreadPoolExecutor(max_workers=k if fold_order == "start" else 2 * k,
                                        thread_name_prefix="adaptive-proposal") if k > 1 else None
        self._cancelled = threading.Event()

    # -- the loop --------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.in_flight)

    def has_room(self) -> bool:
        if self.k == 1 or self.fold_order == "start":
            return len(self.in_flight) < self.k
        return self.in_flight.has_room()

    def spent(self, charged: int) -> int:
        """The count stop decisions and records go by: folded work only, or every call `charged`."""
        return charged if self.folded_spent is None else self.folded_spent

    def submit(self, run_job: RunJob, job: Job) -> None:
        future: Future
        if self._pool is None:              # k = 1: in this thread
            future = Future()
            try:
                future.set_result(run_job(job, self))
            except Exception as e:  # noqa: BLE001 - re-raised by done(), as a pool's future would
                future.set_exception(e)
        else:
            future = self._pool.submit(contextvars.copy_context().run, run_job, job, self)
        self.in_flight.add(future, job)
        self._order.append((future, job))

    def done(self) -> list[JobOutcome]:
        """Wait for the next proposals to fold, in the order they fold."""
        if self.fold_order == "start" or self._pool is None:
            future, job = self._order.popleft()
            if self._release is not None:
                self._release.upto(job.iteration)      # it may now decide on staleness, then validate
            out = future.result()
            self.in_flight.discard(future)
            return [out]
        finished = self.in_flight.wait()
        gone = set(finished)
        self._order = deque(p for p in self._order if p[0] not in gone)
        return [f.result() for f in finished]

    def folded(self, budget_at: int, lost: int = 0) -> None:
        """A proposal (or merge) folded, recorded at `budget_at` scored calls; `lost` calls an interruption cut
        off were given up with it (charged, never folded)."""
        if self.folded_spent is not None:
            self.folded_spent = budget_at + lost

    def archive_changed(self, archive: Archive) -> None:
        self.in_flight.archive_changed(archive)

    def close(self, interrupted: bool) -> None:
        """The loop ended: let waiting proposals go on; when it was interrupted, running proposals stop at
        their next step and nothing waits for them."""
        if interrupted:
            self._cancelled.set()
        if self._release is not None:
            self._release.upto(None)
        if self._pool is not None:
            self._pool.shutdown(wait=not interrupted, cancel_futures=interrupted)

    # -- a running proposal ----------------------------------------------------------------------------------
    def stop_reason(self, job: Job, step: str, committing: bool = False) -> str | None:
        """Why `job` should stop before `step` (None: go on). In start order the decision is taken only before
        validation (`committing`), once every earlier proposal has folded."""
        if self._cancelled.is_set():
            return f"the search was interrupted; stopped {step}"
        if self.k == 1:
            return None
        if self._release is not None:
            if not committing:
                return None
            self._release.wait_for(job.iteration)
        if self.in_flight.stale(job, committing=committing):
            return self.in_flight.stale_reason(job, step)
        return None


__all__ = ["Window"]
