"""The search loop (paper Algorithm 1). One iteration reads top to bottom:

    select    parent = Pareto selection over the archive
    run       minibatch from the FEEDBACK set, executed with traces
    reflect   two LM calls: choose an action + target, then perform the edit
    gate      the child must strictly beat the parent's sum on the same minibatch
    validate  a passing child is scored on the full validation set
    archive   ... and enters the archive with per-row scores, routes and lineage

Merges (when enabled) take the place of a reflective iteration at their cadence. The loop starts
an iteration only while spent < budget; in-flight evaluations finish, so the final count can
overshoot by at most one iteration (k concurrent proposals: k iterations, plus one minibatch for
each proposal that was stopping as stale). After every iteration the state is checkpointed.
"""

from __future__ import annotations

import contextvars
import random
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Sequence

from tqdm.auto import tqdm

from dspy_adaptive.data import Row
from dspy_adaptive.library import Library
from dspy_adaptive.records import ProposalRecord, RowResult
from dspy_adaptive.reflection.propose import Reflector
from dspy_adaptive.search import gate
from dspy_adaptive.search.archive import Archive, Candidate
from dspy_adaptive.search.budget import Budget
from dspy_adaptive.search.checkpoint import CheckpointStore
from dspy_adaptive.search.evaluate import Evaluator
from dspy_adaptive.search.sampling import BatchSampler, sample_minibatch
from dspy_adaptive.search.schedule import Schedule
from dspy_adaptive.search.select import CandidateSelector
from dspy_adaptive.usage import UsageMeter


@dataclass(frozen=True)
class SearchSettings:
    max_metric_calls: int
    minibatch_size: int = 3
    skip_perfect_score: bool = True
    perfect_score: float = 1.0
    failure_score: float = 0.0
    seed: int = 0
    history_size: int = 8
    use_merge: bool = False
    max_merge_invocations: int = 5
    merge_cadence: int = 2
    alignment: str = "mutual_best"
    max_concurrent_proposals: int = 1
    max_idle_iterations: int = 20


@dataclass(frozen=True)
class Job:
    """A started reflective proposal: its parent snapshot, minibatch and the history it reads."""

    iteration: int
    parent: Candidate
    rows: tuple[Row, ...]
    history: str
    archive_size: int                           # candidates archived when the job started (its snapshot)


@dataclass(frozen=True)
class JobOutcome:
    job: Job
    parent_results: tuple[RowResult, ...]
    edit: Any                                   # reflection Edit, or None when reflection was skipped
    child_results: tuple[RowResult, ...] | None
    val_results: tuple[RowResult, ...] | None   # set only when the child passed the gate
    stopped: str | None = None                  # the step a stale job stopped before (concurrent proposals)


class SearchEngine:
    def __init__(self, *, settings: SearchSettings, seed_library: Library, train: Sequence[Row],
                 val: Sequence[Row], evaluator: Evaluator, reflector: Reflector, selector: CandidateSelector,
                 sampler: BatchSampler, budget: Budget, meter: UsageMeter, store: CheckpointStore | None,
                 fingerprint: str, merger: Any = None, progress: bool = True):
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
        self.merge_state: dict[str, Any] = {"invocations": 0, "accepted_since": 0, "tried": []}
        self.committed: set[int] = set()   # iterations whose results are folded into the state
        self.lost_calls = 0                # scored calls of iterations an interruption discarded
        self.idle_iterations = 0           # consecutive iterations that spent no budget
        self.schedule = Schedule()
        self._archive_lock = threading.Lock()   # proposal threads read the archive (_stale) while it grows
        self._validating: set[int] = set()      # iterations of jobs that passed their last stale check
        self._selectable_memo: tuple[Any, int, set[int]] = (None, -1, set())
        evaluator.schedule = reflector.schedule = self.schedule
        self.stop_reason = ""
        if store is not None:
            evaluator.on_new_result = store.append_eval

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> Archive:
        if not len(self.archive):
            self._validate_seed()
        bar = tqdm(total=self.budget.max_calls, desc="Adaptive-GEPA", unit="call", disable=not self.progress,
                   initial=min(self.budget.spent, self.budget.max_calls))
        try:
            if self.s.max_concurrent_proposals <= 1:
                self._run_sequential(bar)
            else:
                self._run_concurrent(bar)
        finally:
            bar.close()
        return self.archive

    def _should_continue(self) -> bool:
        if not self.budget.can_start():
            self.stop_reason = "budget exhausted"
            return False
        if self.idle_iterations >= self.s.max_idle_iterations:
            self.stop_reason = (f"stalled: {self.idle_iterations} iterations in a row spent no budget (parents "
                                "perfect on their cached minibatches, or every reflection rejected)")
            return False
        return True

    def _run_sequential(self, bar) -> None:
        while self._should_continue():
            self.iteration += 1
            record = self._merge_iteration() if self._merge_due() else None
            if record is None:
                record = self._fold(self._run_job(self._start_job()))
            self._finish(record, bar)

    def _run_concurrent(self, bar) -> None:
        """Up to k live reflective proposals in flight, each with its own parent snapshot and minibatch,
        sharing the evaluation threads; results fold into the archive as they complete. A proposal whose
        parent a fold just pushed out (`_doomed`) stops at its next step, so it no longer holds one of the
        k places: a replacement from the new front starts at once instead of after that step (at most k
        such stopping proposals run besides the k live ones, each finishing at most one minibatch)."""
        k = self.s.max_concurrent_proposals
        in_flight: dict[Future, Job] = {}
        with ThreadPoolExecutor(max_workers=2 * k, thread_name_prefix="adaptive-proposal") as pool:
            while in_flight or self._should_continue():
                while (len(in_flight) < 2 * k and sum(not self._doomed(j) for j in in_flight.values()) < k
                       and self._should_continue()):
                    self.iteration += 1
                    if self._merge_due():
                        record = self._merge_iteration()
                        if record is not None:
                            self._finish(record, bar)
                            continue
                    job = self._start_job()
                    in_flight[pool.submit(contextvars.copy_context().run, self._run_job, job)] = job
                if not in_flight:
                    break
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for fut in sorted(done, key=lambda f: in_flight[f].iteration):
                    in_flight.pop(fut)
                    self._finish(self._fold(fut.result()), bar)

    def _finish(self, record: "ProposalRecord", bar) -> None:
        spent_before = self.proposals[-1].budget_at if self.proposals else self._seed_spent()
        self.idle_iterations = 0 if record.budget_at > spent_before else self.idle_iterations + 1
        self.proposals.append(record)
        self.committed.add(record.iteration)
        if record.accepted and record.kind == "reflect":
            self.merge_state["accepted_since"] += 1
        self._checkpoint()
        bar.n = min(self.budget.spent, self.budget.max_calls)
        bar.set_postfix(best=f"{self.archive[self.archive.best_index()].val_mean:.3f}", archive=len(self.archive))
        bar.refresh()

    def _seed_spent(self) -> int:
        return self.archive[0].discovered_at if len(self.archive) else 0

    def _validate_seed(self) -> None:
        results = self.evaluator.evaluate(self.seed_library, self.val, "seed_validation", tag=0)
        self.archive.add(self.seed_library, (), "seed", results, self.budget.spent, 0)
        self.committed.add(0)
        self._checkpoint()

    # -- one reflective proposal: start (main thread) -> run (any thread) -> fold (main thread) ----------
    def _start_job(self) -> "Job":
        parent = self.archive[self.selector.select(self.archive, self.rng)]                       # select
        idx = sample_minibatch(self.sampler, [r.example for r in self.train], self.s.minibatch_size, self.rng)
        if not self.reflector.output_names:
            self.reflector.set_output_names(self._output_names())
        return Job(self.iteration, parent, tuple(self.train[i] for i in idx), self._history(parent.index),
                   archive_size=len(self.archive))

    def _run_job(self, job: "Job") -> "JobOutcome":
        tag = job.iteration
        parent_results = self.evaluator.evaluate(job.parent.library, job.rows, "parent_minibatch", tag=tag)  # run
        if self.s.skip_perfect_score and gate.is_perfect(parent_results, self.s.perfect_score):
            return JobOutcome(job, parent_results, None, None, None)
        if self._stale(job):
            return JobOutcome(job, parent_results, None, None, None, stopped="before reflection")
        edit = self.reflector.propose(job.parent.library, job.rows, parent_results, job.history)         # reflect
        if edit.rejected:
            return JobOutcome(job, parent_results, edit, None, None)
        if self._stale(job):
            return JobOutcome(job, parent_results, edit, None, None, stopped="before its child minibatch")
        child_results = self.evaluator.evaluate(edit.child, job.rows, "child_minibatch", tag=tag)         # gate
        if not gate.minibatch_gate(parent_results, child_results):
            return JobOutcome(job, parent_results, edit, child_results, None)
        if self._stale(job, committing=True):
            return JobOutcome(job, parent_results, edit, child_results, None, stopped="before validation")
        val_results = self.evaluator.evaluate(edit.child, self.val, "validation", tag=tag)               # validate
        return JobOutcome(job, parent_results, edit, child_results, val_results)

    def _stale(self, job: "Job", committing: bool = False) -> bool:
        """Concurrent proposals only: True when candidates archived since the job started pushed its
        parent out of what the selector could pick now (off the Pareto front, or no longer the best).
        The sequential loop would not be improving that parent any more, so the job stops at its next
        step instead of spending budget on it. Never true at k=1 (nothing is archived meanwhile).
        `committing`: the check before validation; passing it commits the job to validate."""
        with self._archive_lock:
            stale = self._pushed_out_locked(job)
            if committing and not stale:
                self._validating.add(job.iteration)
            return stale

    def _doomed(self, job: "Job") -> bool:
        """True when an in-flight job's next `_stale` check will stop it: it has not committed to its
        validation, and its parent is pushed out (which stays so: the selectable set only loses old
        candidates as the archive grows)."""
        with self._archive_lock:
            return job.iteration not in self._validating and self._pushed_out_locked(job)

    def _pushed_out_locked(self, job: "Job") -> bool:
        return len(self.archive) != job.archive_size and job.parent.index not in self._selectable_locked()

    def _selectable_locked(self) -> set[int]:
        """selector.selectable(archive), computed once per archive state: the main loop asks it for every
        in-flight job each time it refills, and the archive only changes by growing."""
        archive, size, selectable = self._selectable_memo
        if archive is not self.archive or size != len(self.archive):
            selectable = self.selector.selectable(self.archive)
            self._selectable_memo = (self.archive, len(self.archive), selectable)
        return selectable

    def add_to_archive(self, library: Library, parents: tuple[int, ...], origin: str,
                       results: Sequence[RowResult], iteration: int) -> Candidate:
        with self._archive_lock:
            return self.archive.add(library, parents, origin, results, self.budget.spent, iteration)

    def _fold(self, out: "JobOutcome") -> "ProposalRecord":
        job = out.job
        base = dict(iteration=job.iteration, parents=(job.parent.index,), minibatch=tuple(r.id for r in job.rows),
                    parent_sum=gate.score_sum(out.parent_results))
        if out.stopped is not None:
            edit = out.edit
            return self._record(kind="stale", action=edit.action if edit else None, slot=edit.slot if edit else None,
                                child_sum=gate.score_sum(out.child_results) if out.child_results else None,
                                accepted=False, child_library=edit.child if edit else None,
                                reason=(f"parent {job.parent.index} {self.selector.pushed_out} while this proposal "
                                        f"was in flight; stopped {out.stopped}"), **base)
        if out.edit is None:
            return self._record(kind="skip", action=None, slot=None, child_sum=None, accepted=False,
                                reason="parent is perfect on the whole minibatch", **base)
        edit = out.edit
        if edit.rejected:
            details = {"rejected_source": edit.rejected_source[:6000]} if edit.rejected_source else {}
            return self._record(kind="reflect", action=edit.action, slot=edit.slot, child_sum=None,
                                accepted=False, reason=edit.reason, details=details, **base)
        child = None
        if out.val_results is not None:                                                            # archive
            child = self.add_to_archive(edit.child, (job.parent.index,), edit.action, out.val_results,
                                        job.iteration)
        return self._record(kind="reflect", action=edit.action, slot=edit.slot,
                            child_sum=gate.score_sum(out.child_results), accepted=child is not None,
                            reason=None if child is not None else "child did not beat the parent on the minibatch",
                            child=child, child_library=edit.child, **base)

    def _output_names(self) -> tuple[str, ...]:
        """Output fields of the user's program, as its seed validation produced them."""
        seed_hash = self.archive[0].library.content_hash
        for row in self.val:
            res = self.evaluator.cache.get((seed_hash, row.id))
            if res is not None and res.output is not None and res.error is None:
                return tuple(res.output)
        return ()

    # -- merge hooks (the merge package plugs in here) ----------------------------------------------------
    def _merge_due(self) -> bool:
        m = self.merge_state
        return (self.s.use_merge and self.merger is not None and m["invocations"] < self.s.max_merge_invocations
                and m["accepted_since"] >= self.s.merge_cadence)

    def _merge_iteration(self) -> ProposalRecord | None:
        return self.merger.run(self)

    # -- bookkeeping ---------------------------------------------------------------------------------------
    def _record(self, *, child: Candidate | None = None, child_library: Library | None = None,
                **fields: Any) -> ProposalRecord:
        lib = child.library if child is not None else child_library
        return ProposalRecord(child_index=child.index if child is not None else None,
                              child_hash=lib.content_hash if lib is not None else None,
                              budget_at=self.budget.spent, **fields)

    def _history(self, parent_index: int) -> str:
        lineage = self.archive.ancestors(parent_index) | {parent_index}
        recent = [p for p in self.proposals if p.kind != "skip" and set(p.parents) & lineage][-self.s.history_size:]
        lines = []
        for p in recent:
            target = f" slot {p.slot}" if p.slot else ""
            outcome = "accepted" if p.accepted else f"rejected: {p.reason}"
            sums = f" (minibatch {p.parent_sum:g} -> {p.child_sum:g})" if p.child_sum is not None else ""
            lines.append(f"- iteration {p.iteration}: {p.kind} {p.action or ''}{target} on candidate "
                         f"{'/'.join(map(str, p.parents))}: {outcome}{sums}")
        return "\n".join(lines)

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": 1, "fingerprint": self.fingerprint, "iteration": self.iteration,
            "archive": self.archive.to_list(), "budget": self.budget.report().by_kind,
            "rng": _rng_to_json(self.rng.getstate()), "proposals": [p.to_dict() for p in self.proposals],
            "merge_state": self.merge_state, "usage": self.meter.snapshot(),
            "committed": sorted(self.committed), "lost_calls": self.lost_calls,
            "idle_iterations": self.idle_iterations,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = state["iteration"]
        self.archive = Archive(tuple(r.id for r in self.val), [Candidate.from_dict(c) for c in state["archive"]])
        self.budget.restore(state["budget"])
        self.rng.setstate(_rng_from_json(state["rng"]))
        self.proposals = [ProposalRecord.from_dict(p) for p in state["proposals"]]
        self.merge_state = state["merge_state"]
        self.committed = set(state["committed"])
        self.lost_calls = state.get("lost_calls", 0)
        self.idle_iterations = state.get("idle_iterations", 0)

    def _checkpoint(self) -> None:
        if self.store is not None:
            self.store.commit(self.state_dict())


def _rng_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _rng_from_json(data: list) -> tuple:
    version, internal, gauss = data
    return (version, tuple(internal), gauss)
