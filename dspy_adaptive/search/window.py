"""The window of reflective proposals in flight: up to k at once, k = 1 being the sequential loop.

The search loop asks the window three things: is there room for another proposal, which proposals are done
(and in what order they fold), and -- from inside a running proposal -- should it stop because its parent
was pushed out while it ran (`InFlight` answers that). Two fold orders:

* "start" (default): proposals fold in the order they started, and every decision is taken at a point fixed by
  the seed, not by thread timing. A proposal starts (and a due merge runs) only when the oldest one folds, from
  the archive, RNG and *folded* budget at that point. A running proposal asks whether it is stale before each
  step that spends scored calls. Before its validation it waits until every proposal started before it has
  *settled* -- finished without a child for the archive, or folded its child -- and then judges its parent
  against the archive as the iterations before its own left it (`Archive.as_of`). Before its child
  minibatch it does the same one proposal back: it waits for the proposals started before its predecessor
  and judges on the archive as they left it, so its child minibatch overlaps its predecessor's child
  minibatch and validation instead of queueing behind them (benchmarks.perf, 50 ms, k=4, seeds 0-3: wall
  per scored call 0.72x -> 0.64x dspy.GEPA's on climb, 0.92x -> 0.82x on mixed, same best scores; the price
  is the child minibatch of a proposal whose parent its predecessor beats: calls to reach the common score
  at k=4 over seeds 0-39, `benchmarks.perf --calls-to-score`, measured again after: 1.07x k=1's on climb,
  1.13x on mixed). Its reflection does not wait (it
  overlaps the proposals started before it: most of the wall time k buys). A proposal whose parent a
  concurrent one has since beaten so stops instead of spending a validation (and, mostly, a child
  minibatch) on an outdated parent, and every decision depends on the seed only (with an LM whose answers
  depend only on the prompt and the paper's accounting, a seeded run is reproducible at any k). Only
  proposals heading to validation hold later ones up. Records carry the folded count, so they do not depend
  on what else was in flight.
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


class _Settled:
    """Start order: which started proposals have settled -- finished without a child for the archive, or folded
    -- so a later proposal can judge its parent on an archive no earlier proposal will still change."""

    def __init__(self, cancelled: threading.Event) -> None:
        self._cond = threading.Condition()
        self._started: set[int] = set()
        self._settled: set[int] = set()
        self._cancelled = cancelled

    def started(self, iteration: int) -> None:
        with self._cond:
            self._started.add(iteration)

    def settle(self, iteration: int) -> None:
        with self._cond:
            self._settled.add(iteration)
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_before(self, iteration: int) -> None:
        """Until every proposal started before `iteration` has settled (or the search was interrupted)."""
        with self._cond:
            self._cond.wait_for(lambda: self._cancelled.is_set()
                                or all(i in self._settled for i in self._started if i < iteration))


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
        self.selector, self.archive = selector, archive
        self.in_flight = InFlight(selector, k, archive)
        self.folded_spent = folded_spent
        self._cancelled = threading.Event()
        self._settled = _Settled(self._cancelled) if fold_order == "start" else None
        self._order: deque[tuple[Future, Job]] = deque()
        self._pool = ThreadPoolExecutor(max_workers=k if fold_order == "start" else 2 * k,
                                        thread_name_prefix="adaptive-proposal") if k > 1 else None

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
        if self._settled is not None:
            self._settled.started(job.iteration)
        if self._pool is None:              # k = 1: in this thread
            future = Future()
            try:
                future.set_result(self._run(run_job, job))
            except Exception as e:  # noqa: BLE001 - re-raised by done(), as a pool's future would
                future.set_exception(e)
        else:
            future = self._pool.submit(contextvars.copy_context().run, self._run, run_job, job)
        self.in_flight.add(future, job)
        self._order.append((future, job))

    def _run(self, run_job: RunJob, job: Job) -> JobOutcome:
        """Run a proposal; one that ends without a child for the archive settles at once."""
        out = None
        try:
            out = run_job(job, self)
            return out
        finally:
            if self._settled is not None and (out is None or out.val_results is None):
                self._settled.settle(job.iteration)

    def done(self) -> list[JobOutcome]:
        """Wait for the next proposals to fold, in the order they fold."""
        if self.fold_order == "start" or self._pool is None:
            future, job = self._order.popleft()
            out = future.result()
            self.in_flight.discard(future)
            return [out]
        finished = self.in_flight.wait()
        gone = set(finished)
        self._order = deque(p for p in self._order if p[0] not in gone)
        return [f.result() for f in finished]

    def folded(self, iteration: int, budget_at: int, lost: int = 0) -> None:
        """A proposal (or merge) of `iteration` folded, recorded at `budget_at` scored calls; `lost` calls an
        interruption cut off were given up with it (charged, never folded)."""
        if self.folded_spent is not None:
            self.folded_spent = budget_at + lost
        if self._settled is not None:
            self._settled.settle(iteration)

    def archive_changed(self, archive: Archive) -> None:
        self.in_flight.archive_changed(archive)

    def close(self, interrupted: bool) -> None:
        """The loop ended: let waiting proposals go on; when it was interrupted, running proposals stop at
        their next step and nothing waits for them."""
        if interrupted:
            self._cancelled.set()
            if self._settled is not None:
                self._settled.wake()
        if self._pool is not None:
            self._pool.shutdown(wait=not interrupted, cancel_futures=interrupted)

    # -- a running proposal ----------------------------------------------------------------------------------
    def stop_reason(self, job: Job, step: str, committing: bool = False, scored: bool = True) -> str | None:
        """Why `job` should stop before `step` (None: go on): the search was interrupted, or its parent was
        pushed out of what the selector could pick by candidates archived since it started (see the module
        docstring for when start order decides). `scored`: the step spends scored calls; in start order only
        those wait for the proposals started before (a reflection overlaps them)."""
        if self._cancelled.is_set():
            return f"the search was interrupted; stopped {step}"
        if self.k == 1:
            return None
        if self._settled is not None:
            if not scored:
                return None
            upto = job.iteration if committing else job.iteration - 1   # (the child minibatch: see the docstring)
            self._settled.wait_before(upto)
            if self._cancelled.is_set():
                return f"the search was interrupted; stopped {step}"
            if not self.archive.archived_since(job.archive_size, upto):
                return None                       # nothing archived since it started by the iterations judged
            if job.parent.index in self.selector.selectable(self.archive.as_of(upto)):
                return None
            return self.in_flight.stale_reason(job, step)
        if self.in_flight.stale(job, committing=committing):
            return self.in_flight.stale_reason(job, step)
        return None


__all__ = ["Window"]
