"""The search loop (paper Algorithm 1). One iteration reads top to bottom:

    select    parent = Pareto selection over the archive
    run       minibatch from the FEEDBACK set, executed with traces
    reflect   two LM calls: choose an action + target, then perform the edit
    gate      the child must strictly beat the parent's sum on the same minibatch
    validate  a passing child is scored on the full validation set
    archive   ... and enters the archive with per-row scores, routes and lineage

Merges (when enabled) take the place of a reflective iteration at their cadence: the merge proposer
returns a proposal already checked on its gate rows, and the engine validates, archives and records
it, as it does a reflective child. The loop starts an iteration only while spent < budget; in-flight
evaluations finish, so the final count can overshoot by at most one iteration (k concurrent
proposals: k iterations, plus one minibatch for each proposal that was stopping as stale). After
every iteration the state is checkpointed.
"""

from __future__ import annotations

import contextvars
import random
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Sequence

from tqdm.auto import tqdm

from dspy_adaptive.data import Row
from dspy_adaptive.library import Library
from dspy_adaptive.merge.proposer import MergeProposer, MergeState
from dspy_adaptive.records import ProposalRecord, RowResult
from dspy_adaptive.reflection.propose import Reflector
from dspy_adaptive.reflection.traces import recent_history
from dspy_adaptive.search import gate
from dspy_adaptive.search.archive import Archive, Candidate
from dspy_adaptive.search.budget import Budget
from dspy_adaptive.search.checkpoint import STATE_VERSION, CheckpointStore
from dspy_adaptive.search.evaluate import Evaluator
from dspy_adaptive.search.inflight import InFlight, Job, JobOutcome
from dspy_adaptive.search.sampling import BatchSampler, sample_minibatch
from dspy_adaptive.search.schedule import Schedule
from dspy_adaptive.search.select import CandidateSelector
from dspy_adaptive.usage import UsageMeter


@dataclass(frozen=True)
class SearchSettings:
    """What the loop itself reads (the budget's size lives in `Budget`, the metric's failure score in the
    `Evaluator`, the merge alignment in the `MergeProposer`)."""

    minibatch_size: int = 3
    skip_perfect_score: bool = True
    perfect_score: float = 1.0
    seed: int = 0
    history_size: int = 8
    use_merge: bool = False
    max_merge_invocations: int | None = 5   # None: no limit
    merge_cadence: int = 1
    merge_cap_counts: str = "accepted"       # what max_merge_invocations counts (merge.proposer.MERGE_CAP_COUNTS)
    merge_parent_copies: str = "measure"     # merge.proposer.PARENT_COPY_POLICIES (read by the MergeProposer)
    max_concurrent_proposals: int = 1
    fold_order: str = "start"                # k > 1: "start" (reproducible) or "completion" (see _run_concurrent)
    max_idle_iterations: int = 20
    max_candidates: int | None = None        # stop once the archive holds this many (the seed included)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SearchEngine:
    def __init__(self, *, settings: SearchSettings, seed_library: Library, train: Sequence[Row],
                 val: Sequence[Row], evaluator: Evaluator, reflector: Reflector, selector: CandidateSelector,
                 sampler: BatchSampler, budget: Budget, meter: UsageMeter, store: CheckpointStore | None,
                 fingerprint: str, merger: MergeProposer | None = None, progress: bool = True,
                 observers: Sequence[Callable[["SearchEngine", ProposalRecord], None]] = ()):
        self.s = settings
        self.seed_library = seed_library
        self.train, self.val = list(train), list(val)
        self.evaluator, self.reflector, self.selector, self.sampler = evaluator, reflector, selector, sampler
        self.budget, self.meter, self.store = budget, meter, store
        self.fingerprint = fingerprint
        self.merger = merger
        self.progress = progress
        self.archive = Archive(tuple(r.id for r in val))
        self.rng = random.Random(settings.seed)
        self.iteration = 0
        self.proposals: list[ProposalRecord] = []
        self.merge_state = MergeState()
        self.committed: set[int] = set()   # iterations whose results are folded into the state
        self.lost_calls = 0                # scored calls of iterations an interruption discarded
        self.idle_iterations = 0           # consecutive iterations that spent no budget
        self.schedule = Schedule()
        self.stop_reason = ""
        self._in_flight: InFlight | None = None   # set while concurrent proposals run
        self.observers = list(observers)          # called with (engine, record) after each recorded proposal
        self._usage_by_iteration: dict[int, dict[str, dict[str, float]]] = {}   # each proposal's own ledger
        self._release: Release | None = None      # set while ordered concurrent proposals run
        self._committed_spent: int | None = None  # ordered concurrency: scored calls of folded work only
        self._pending_spend = 0                   # scored calls of the proposal being folded
        self._val_by_id = {r.id: r for r in self.val}
        evaluator.schedule = reflector.schedule = self.schedule
        self._bar: Any = None                     # the progress bar while the loop runs
        self._seed_done: dict[str, RowResult] = {}
        evaluator.on_new_result = self._on_row

    def _on_row(self, tag: int, key: str, result: RowResult) -> None:
        """Each scored call as it completes: logged at once (a kill mid-batch hides nothing), shown on the bar."""
        if self.store is not None:
            self.store.append_eval(tag, key, result)
        bar = self._bar
        if bar is not None:     # past the total: the last iteration's overshoot, shown as it happens
            bar.update(1)

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> Archive:
        bar = tqdm(total=self.budget.max_calls, desc="Adaptive-GEPA", unit="call", disable=not self.progress,
                   initial=self.budget.spent)
        self._bar = bar
        try:
            if not len(self.archive):
                bar.set_postfix_str("validating the seed")
                self._validate_seed()
                bar.n = self.budget.spent
                bar.set_postfix_str("")
                bar.refresh()
            if self.s.max_concurrent_proposals <= 1:
                self._run_sequential(bar)
            else:
                self._run_concurrent(bar)
        finally:
            self._bar = None
            bar.close()
        self._checkpoint()   # the saved state also says why the run stopped
        return self.archive

    def _spent(self) -> int:
        """Scored calls so far: the budget's count, or with ordered concurrency the calls of folded work only
        (in-flight charges depend on timing; what folded does not)."""
        return self.budget.spent if self._committed_spent is None else self._committed_spent

    def _should_continue(self) -> bool:
        if self._spent() >= self.budget.max_calls:   # (with ordered concurrency: folded work only)
            self.stop_reason = "budget exhausted"
            return False
        reason = self.budget.cost_stop_reason()
        if reason is not None:
            self.stop_reason = reason
            return False
        if self.s.max_candidates is not None and len(self.archive) >= self.s.max_candidates:
            self.stop_reason = f"candidate cap reached: {len(self.archive)} candidates (max_candidates)"
            return False
        if self.idle_iterations >= self.s.max_idle_iterations:
            self.stop_reason = (f"stalled: {self.idle_iterations} iterations in a row spent no budget (parents "
                                "perfect on their cached minibatches, or every reflection rejected)")
            return False
        return True

    def _run_sequential(self, bar) -> None:
        while self._should_continue():
            self.iteration += 1
            record = self._metered_merge_step() if self._merge_due() else None
            if record is None:
                record = self._fold(self._run_job(self._start_job()))
            self._finish(record, bar)

    def _run_concurrent(self, bar) -> None:
        if self.s.fold_order == "start":
            self._run_concurrent_ordered(bar)
        else:
            self._run_concurrent_as_completed(bar)

    def _run_concurrent_ordered(self, bar) -> None:
        """Reproducible concurrency (fold_order="start"): up to k reflective proposals in flight, folded in the
        order they started. Every decision is taken at a point fixed by the seed, not by thread timing: a
        proposal starts (and a due merge runs) only when the oldest one folds, from the archive, RNG and
        folded budget at that point; a running proposal decides whether it is stale only before its
        validation, after every proposal started before it has folded. With an LM whose answers depend only
        on the prompt and the paper's accounting (reuse_scores=False), a seeded run ends the same at any k."""
        k = self.s.max_concurrent_proposals
        in_flight = self._in_flight = InFlight(self.selector, k, self.archive)
        release = self._release = Release()
        self._committed_spent = self.budget.spent if not self.evaluator.reuse_scores else None
        window: deque[tuple[Future, Job]] = deque()
        try:
            with ThreadPoolExecutor(max_workers=k, thread_name_prefix="adaptive-proposal") as pool:
                while True:
                    while len(window) < k and self._should_continue():
                        self.iteration += 1
                        record = self.merge_step() if self._merge_due() else None
                        if record is not None:
                            self._finish(record, bar)
                            continue
                        job = self._start_job()
                        future = pool.submit(contextvars.copy_context().run, self._run_job, job, in_flight)
                        in_flight.add(future, job)
                        window.append((future, job))
                    if not window:
                        break
                    future, job = window.popleft()
                    release.upto(job.iteration)          # it may now decide on staleness, then validate
                    out = future.result()
                    in_flight.discard(future)
                    self._finish(self._fold(out), bar)
        finally:
            release.upto(None)
            self._in_flight = self._release = None
            if self._committed_spent is not None:
                self._committed_spent = None

    def _run_concurrent_as_completed(self, bar) -> None:
        """Up to k live reflective proposals in flight, each with its own parent snapshot and minibatch,
        sharing the evaluation threads; results fold into the archive as they complete (fold_order=
        "completion": sooner, but a run depends on thread timing). A proposal whose parent a fold just
        pushed out is doomed: it stops at its next step and no longer holds one of the k places, so a
        replacement from the new front starts at once (see `InFlight`)."""
        k = self.s.max_concurrent_proposals
        in_flight = self._in_flight = InFlight(self.selector, k, self.archive)
        try:
            with ThreadPoolExecutor(max_workers=2 * k, thread_name_prefix="adaptive-proposal") as pool:
                while len(in_flight) or self._should_continue():
                    while in_flight.has_room() and self._should_continue():
                        self.iteration += 1
                        record = self._metered_merge_step() if self._merge_due() else None
                        if record is not None:
                            self._finish(record, bar)
                            continue
                        job = self._start_job()
                        in_flight.add(pool.submit(contextvars.copy_context().run, self._run_job, job, in_flight), job)
                    if not len(in_flight):
                        break
                    for future in in_flight.wait():
                        self._finish(self._fold(future.result()), bar)
        finally:
            self._in_flight = None

    def _metered_merge_step(self) -> ProposalRecord | None:
        with self.meter.child() as sub:
            record = self.merge_step()
        return None if record is None else replace(record, usage=sub.snapshot())

    def _finish(self, record: ProposalRecord, bar) -> None:
        usage = self._usage_by_iteration.pop(record.iteration, None)
        if usage is not None and not record.usage:
            record = replace(record, usage=usage)
        if self._committed_spent is not None:
            self._committed_spent = record.budget_at
        spent_before = self.proposals[-1].budget_at if self.proposals else self._seed_spent()
        self.idle_iterations = 0 if record.budget_at > spent_before else self.idle_iterations + 1
        self.proposals.append(record)
        self.committed.add(record.iteration)
        if record.accepted and record.kind == "reflect":
            self.merge_state = self.merge_state.accepted_reflection()
        self._checkpoint()
        bar.n = self.budget.spent
        bar.set_postfix(best=f"{self.archive[self.archive.best_index()].val_mean:.3f}", archive=len(self.archive),
                        cost=f"${self.meter.total_cost():.4f}")
        bar.refresh()
        for observe in self.observers:
            observe(self, record)

    def _seed_spent(self) -> int:
        return self.archive[0].discovered_at if len(self.archive) else 0

    def restore_seed_rows(self, results: Sequence[RowResult]) -> None:
        """Seed-validation rows an interrupted run already scored (and paid for): they are charged again to this
        run's budget as spent, kept, and not run again."""
        wanted = {r.id for r in self.val}
        self._seed_done = {res.row_id: res for res in results if res.row_id in wanted}
        if self._seed_done:
            self.budget.charge("seed_validation", len(self._seed_done))
            for res in self._seed_done.values():
                self.evaluator.cache[(self.seed_library.content_hash, res.row_id)] = res
                self.evaluator.note_fault(res)

    def _validate_seed(self) -> None:
        """Score the seed on the whole validation set. Each row is logged as it completes, so an interrupted
        seed validation resumes with the rows it has (see `restore_seed_rows`)."""
        done = self._seed_done
        todo = [r for r in self.val if r.id not in done]
        fresh = {res.row_id: res for res in self.evaluator.evaluate(self.seed_library, todo, "seed_validation",
                                                                    tag=0)} if todo else {}
        results = tuple(done.get(r.id) or fresh[r.id] for r in self.val)
        self.archive.add(self.seed_library, (), "seed", results, self.budget.spent, 0)
        self.committed.add(0)
        self._checkpoint()

    # -- one reflective proposal: start (main thread) -> run (any thread) -> fold (main thread) ----------
    def _start_job(self) -> Job:
        parent = self.archive[self.selector.select(self.archive, self.rng)]                       # select
        idx = sample_minibatch(self.sampler, [r.example for r in self.train], self.s.minibatch_size, self.rng)
        if not self.reflector.output_names:
            self.reflector.set_output_names(self._output_names())
        lineage = self.archive.ancestors(parent.index) | {parent.index}
        return Job(self.iteration, parent, tuple(self.train[i] for i in idx),
                   recent_history(self.proposals, lineage, self.s.history_size), archive_size=len(self.archive))

    def _run_job(self, job: Job, in_flight: InFlight | None = None) -> JobOutcome:
        """Run one proposal to its end under its own cost ledger (see `_run_job_steps`)."""
        with self.meter.child() as sub:
            try:
                return self._run_job_steps(job, in_flight)
            finally:
                self._usage_by_iteration[job.iteration] = sub.snapshot()

    def _run_job_steps(self, job: Job, in_flight: InFlight | None = None) -> JobOutcome:
        """Run one proposal to its end. With concurrent proposals (`in_flight`), a job whose parent was
        pushed out stops before its next step instead of spending budget on it."""
        release = self._release

        def stopped(step: str, committing: bool = False) -> str | None:
            if in_flight is None:
                return None
            if release is not None:                  # ordered: decide only once every earlier proposal folded
                if not committing:
                    return None
                release.wait_for(job.iteration)
            if in_flight.stale(job, committing=committing):
                return in_flight.stale_reason(job, step)
            return None

        parent_results = self.evaluator.evaluate(job.parent.library, job.rows, "parent_minibatch", tag=job.iteration)
        if self.s.skip_perfect_score and gate.is_perfect(parent_results, self.s.perfect_score):
            return JobOutcome(job, parent_results, None, None, None)
        if why := stopped("before reflection"):
            return JobOutcome(job, parent_results, None, None, None, stopped=why)
        edit = self.reflector.propose(job.parent.library, job.rows, parent_results, job.history)        # reflect
        if edit.rejected:
            return JobOutcome(job, parent_results, edit, None, None)
        if why := stopped("before its child minibatch"):
            return JobOutcome(job, parent_results, edit, None, None, stopped=why)
        child_results = self.evaluator.evaluate(edit.child, job.rows, "child_minibatch", tag=job.iteration)  # gate
        if not gate.minibatch_gate(parent_results, child_results):
            return JobOutcome(job, parent_results, edit, child_results, None)
        if why := stopped("before validation", committing=True):
            return JobOutcome(job, parent_results, edit, child_results, None, stopped=why)
        val_results = self.evaluator.evaluate(edit.child, self.val, "validation", tag=job.iteration)    # validate
        return JobOutcome(job, parent_results, edit, child_results, val_results)

    def _fold(self, out: JobOutcome) -> ProposalRecord:
        job, edit = out.job, out.edit
        self._pending_spend = len(out.parent_results) + len(out.child_results or ()) + len(out.val_results or ())
        base = dict(iteration=job.iteration, parents=(job.parent.index,), minibatch=tuple(r.id for r in job.rows),
                    parent_sum=gate.score_sum(out.parent_results))
        if out.stopped is not None:
            return self._record(kind="stale", action=edit.action if edit else None, slot=edit.slot if edit else None,
                                child_sum=gate.score_sum(out.child_results) if out.child_results else None,
                                accepted=False, failure="stale", reason=out.stopped,
                                child_library=edit.child if edit else None, **base)
        if edit is None:
            return self._record(kind="skip", action=None, slot=None, child_sum=None, accepted=False,
                                failure="perfect", reason="parent is perfect on the whole minibatch", **base)
        if edit.rejected:
            return self._record(kind="reflect", action=edit.action, slot=edit.slot, child_sum=None, accepted=False,
                                failure=edit.failure, reason=edit.reason, details=edit.details(), **base)
        child = None
        if out.val_results is not None:                                                            # archive
            child = self.add_to_archive(edit.child, (job.parent.index,), edit.action, out.val_results,
                                        job.iteration)
        return self._record(kind="reflect", action=edit.action, slot=edit.slot,
                            child_sum=gate.score_sum(out.child_results), accepted=child is not None,
                            failure=None if child is not None else "gate",
                            reason=None if child is not None else "child did not beat the parent on the minibatch",
                            child=child, child_library=edit.child, details=edit.details(), **base)

    def add_to_archive(self, library: Library, parents: tuple[int, ...], origin: str,
                       results: Sequence[RowResult], iteration: int) -> Candidate:
        cand = self.archive.add(library, parents, origin, results, self._spent_at(), iteration)
        if self._in_flight is not None:
            self._in_flight.archive_changed(self.archive)
        return cand

    def _output_names(self) -> tuple[str, ...]:
        """Output fields of the user's program, as its seed validation produced them."""
        seed_hash = self.archive[0].library.content_hash
        for row in self.val:
            res = self.evaluator.cache.get((seed_hash, row.id))
            if res is not None and res.output is not None and res.error is None:
                return tuple(res.output)
        return ()

    # -- merges: the proposer proposes; the engine validates, archives and records ------------------------
    def _merge_due(self) -> bool:
        return (self.s.use_merge and self.merger is not None
                and self.merge_state.due(self.s.max_merge_invocations, self.s.merge_cadence,
                                         self.s.merge_cap_counts))

    def merge_step(self) -> ProposalRecord | None:
        """One merge at the current iteration, or None (nothing spent) when no eligible pair exists."""
        proposal = self.merger.propose(self.archive, self.merge_state, self.rng, self._merge_check)  # pair..gate
        if proposal is None:
            return None
        self._pending_spend = len(proposal.gate_rows) + (len(self.val) if proposal.passed else 0)
        if not proposal.checked:    # a copy of a parent, dropped unchecked (merge_parent_copies="skip")
            self.merge_state = self.merge_state.copy_skipped(proposal.parents)
            return self._record(iteration=self.iteration, kind="merge", parents=proposal.parents, action="merge",
                                slot=None, minibatch=(), parent_sum=None, child_sum=None, accepted=False,
                                failure="merge_copy",
                                reason=f"the merged child is identical to parent {proposal.parent_copy}; "
                                       "dropped before its check",
                                child_library=proposal.child, details=proposal.details)
        self.merge_state = self.merge_state.started(proposal.parents)
        child, details = None, proposal.details
        if proposal.passed:
            self.merge_state = self.merge_state.passed()
            results = self.evaluator.evaluate(proposal.child, self.val, "validation", tag=self.iteration)  # validate
            library, details = self.merger.cleaned(proposal, results)                                  # cleanup
            child = self.add_to_archive(library, proposal.parents, "merge", results, self.iteration)  # archive
        return self._record(iteration=self.iteration, kind="merge", parents=proposal.parents, action="merge",
                            slot=None, minibatch=proposal.gate_rows, parent_sum=max(proposal.parent_sums),
                            child_sum=proposal.child_sum, accepted=child is not None,
                            failure=None if child is not None else "merge_gate",
                            reason=None if child is not None else
                            "merged child scored below the stronger parent on the gate rows",
                            child=child, child_library=proposal.child, details=details)

    def _merge_check(self, library: Library, row_ids: Sequence[str]) -> tuple[RowResult, ...]:
        rows = [self._val_by_id[i] for i in row_ids]
        return self.evaluator.evaluate(library, rows, "merge_check", tag=self.iteration)

    # -- bookkeeping ---------------------------------------------------------------------------------------
    def _record(self, *, child: Candidate | None = None, child_library: Library | None = None,
                **fields: Any) -> ProposalRecord:
        lib = child.library if child is not None else child_library
        return ProposalRecord(child_index=child.index if child is not None else None,
                              child_hash=lib.content_hash if lib is not None else None,
                              budget_at=self._spent_at(), **fields)

    def _spent_at(self) -> int:
        """The budget count to record for the work being folded: with ordered concurrency, the folded count
        plus this proposal's own scored calls (so records do not depend on what else was in flight)."""
        if self._committed_spent is None:
            return self.budget.spent
        return self._committed_spent + self._pending_spend

    def state_dict(self) -> dict[str, Any]:
        """The committed search state, as `state.json` holds it (and `AdaptiveGEPAResult.from_state` reads it)."""
        return {
            "version": STATE_VERSION, "fingerprint": self.fingerprint, "iteration": self.iteration,
            "archive": self.archive.to_list(), "budget": self.budget.report().by_kind,
            "rng": _rng_to_json(self.rng.getstate()), "proposals": [p.to_dict() for p in self.proposals],
            "merge_state": self.merge_state.to_dict(), "usage": self.meter.snapshot(),
            "committed": sorted(self.committed), "lost_calls": self.lost_calls,
            "idle_iterations": self.idle_iterations,
            "val_ids": [r.id for r in self.val], "max_calls": self.budget.max_calls, "seed": self.s.seed,
            "stop_reason": self.stop_reason, "reproducibility": self.reproducibility(),
            "schedule": self.schedule.to_list(),
        }

    def reproducibility(self) -> str:
        """Whether the seed fixes this run (given an LM whose answers depend only on the prompt), and why."""
        k = self.s.max_concurrent_proposals
        if k > 1 and self.s.fold_order != "start":
            return f"not fixed by the seed: k={k} proposals fold as they complete (fold_order='completion')"
        if k > 1 and self.evaluator.reuse_scores:
            return f"not fixed by the seed: k={k} with reuse_scores=True (what is charged depends on timing)"
        return f"fixed by the seed (k={k}" + (", proposals folded in start order)" if k > 1 else ")")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = state["iteration"]
        self.archive = Archive(tuple(r.id for r in self.val), [Candidate.from_dict(c) for c in state["archive"]])
        self.budget.restore(state["budget"])
        self.rng.setstate(_rng_from_json(state["rng"]))
        self.proposals = [ProposalRecord.from_dict(p) for p in state["proposals"]]
        self.merge_state = MergeState.from_dict(state["merge_state"])
        self.committed = set(state["committed"])
        self.lost_calls = state.get("lost_calls", 0)
        self.idle_iterations = state.get("idle_iterations", 0)
        self.schedule.restore(state.get("schedule") or [])

    def _checkpoint(self) -> None:
        if self.store is not None:
            self.store.commit(self.state_dict())


class Release:
    """Ordered concurrency: the main loop releases proposals in start order; a proposal waits for its turn
    before the one decision that depends on the archive as folded so far (staleness before validation)."""

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


def _rng_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _rng_from_json(data: list) -> tuple:
    version, internal, gauss = data
    return (version, tuple(internal), gauss)
