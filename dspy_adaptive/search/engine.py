"""The search loop (paper Algorithm 1). One iteration reads top to bottom:

    select    parent = Pareto selection over the archive (gepa's frontier of `frontier_type`)
    run       minibatch from the FEEDBACK set, executed with traces
    reflect   two LM calls: choose an action + target, then perform the edit
    gate      the child must strictly beat the parent's sum on the same minibatch
    validate  a passing child is scored on the full validation set
    archive   ... and enters the archive with per-row scores, routes and lineage

Merges (when enabled) take the place of a reflective iteration at their cadence: the merge proposer
returns a proposal already checked on its gate rows, and the engine validates, archives and records
it, as it does a reflective child. There is one loop: a window of up to k proposals in flight
(`search.window`; k = 1 is the sequential loop). An iteration starts only while `Budget.stop_reason`
allows it; in-flight evaluations finish, so the final count can overshoot by at most one iteration (k
concurrent proposals: k iterations, plus one minibatch for each proposal that was stopping as stale).
Each proposal's and merge's LM usage is metered in its own ledger. After every iteration the state is
checkpointed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from dspy_adaptive.data import Row
from dspy_adaptive.lm.usage import UsageMeter
from dspy_adaptive.merge.proposer import MergeState
from dspy_adaptive.merge.settings import MergeSettings
from dspy_adaptive.program.library import Library
from dspy_adaptive.reflection.propose import Reflector
from dspy_adaptive.reflection.traces import recent_history
from dspy_adaptive.sandbox.dspy_types import field_types
from dspy_adaptive.schema import ProposalRecord, RowResult
from dspy_adaptive.search import gate
from dspy_adaptive.search.archive import Archive, Candidate
from dspy_adaptive.search.budget import Budget
from dspy_adaptive.search.checkpoint import CheckpointStore
from dspy_adaptive.search.evaluate import Evaluator
from dspy_adaptive.search.frontier import require_objectives
from dspy_adaptive.search.inflight import Job, JobOutcome
from dspy_adaptive.search.progress import SearchProgress
from dspy_adaptive.search.sampling import BatchSampler, sample_minibatch
from dspy_adaptive.search.schedule import Schedule
from dspy_adaptive.search.select import make_selector
from dspy_adaptive.search.settings import SearchSettings
from dspy_adaptive.search.window import Window


@dataclass(frozen=True)
class RunServices:
    """What a search runs with, built by the run assembly: scored calls go through the evaluator and are
    charged to the budget; the meter keeps the cost ledger; the store (None: no log_dir) keeps checkpoints;
    the schedule records each step; the progress bar shows every scored call."""

    evaluator: Evaluator
    budget: Budget
    meter: UsageMeter
    store: CheckpointStore | None
    schedule: Schedule
    progress: SearchProgress


class SearchEngine:
    """The search loop (see the module docstring). `run()` runs it to its stop; `state_dict()` is the committed
    state, which `load_state_dict` restores on resume."""

    def __init__(self, *, settings: SearchSettings, merge: MergeSettings, seed_library: Library,
                 train: Sequence[Row], val: Sequence[Row], services: RunServices, reflector: Reflector,
                 sampler: BatchSampler, observers: Sequence[Callable[["SearchEngine", ProposalRecord], None]] = ()):
        self.s, self.merge = settings, merge
        self.seed_library = seed_library
        self.train, self.val = list(train), list(val)
        self.evaluator, self.budget, self.meter = services.evaluator, services.budget, services.meter
        self.store, self.schedule, self.progress = services.store, services.schedule, services.progress
        self.reflector, self.sampler = reflector, sampler
        self.selector = make_selector(settings.candidate_selection)
        self.merger = merge.proposer()
        self.archive = Archive(tuple(r.id for r in val), frontier_type=settings.frontier_type)
        self.rng = random.Random(settings.seed)
        self.iteration = 0
        self.proposals: list[ProposalRecord] = []
        self.merge_state = MergeState()
        self.committed: set[int] = set()   # iterations whose results are folded into the state
        self.lost_calls = 0                # scored calls an interruption cut off whose results went unused
        self.stop_reason = ""
        self.observers = list(observers)          # called with (engine, record) after each recorded proposal
        self._window: Window | None = None        # set while the loop runs
        self._usage_by_iteration: dict[int, dict[str, dict[str, float]]] = {}   # each proposal's own ledger
        self._pending_spend = 0                   # scored calls of the proposal being folded
        self._val_by_id = {r.id: r for r in self.val}
        self._seed_done: dict[str, RowResult] = {}
        self.allowed_before = 0                   # the largest budget an earlier session of this run had

    # -- the loop ----------------------------------------------------------------------------------------
    def allowed_calls(self) -> int:
        """The largest budget any session of this run was given: what its scored calls are measured against (a
        rerun with a smaller budget than an earlier session's ends at once; it did not overshoot)."""
        return max(self.allowed_before, self.budget.max_calls)

    def run(self) -> Archive:
        spent = self.budget.spent    # (past this session's budget but within an earlier one's: ends here, no overshoot)
        total = spent if self.budget.max_calls <= spent <= self.allowed_before else self.budget.max_calls
        self.progress.open(total=total, initial=spent)
        try:
            if not len(self.archive):
                self._validate_seed()
            self._loop()
        finally:
            self.progress.close()
        self.lost_calls += self.evaluator.replay.expire()   # pending calls no redone work asked for
        self._checkpoint()   # the saved state also says why the run stopped
        return self.archive

    def _loop(self) -> None:
        """The one loop: keep up to k proposals in flight (k = 1: one at a time, in this thread), start a due
        merge when there is room, fold proposals in the window's order, stop when the budget says so."""
        # (calls an interruption cut off are charged but belong to no folded work until they are replayed)
        folded = (self.budget.spent - len(self.evaluator.replay)
                  if self.s.fold_order == "start" and not self.evaluator.reuse_scores else None)
        window = self._window = Window(self.s.max_concurrent_proposals, self.s.fold_order, self.selector,
                                       self.archive, folded)
        interrupted = True
        try:
            while True:
                while window.has_room() and self._may_start(window):
                    self.iteration += 1
                    record = self.merge_step() if self.merge.due(self.merge_state) else None
                    if record is not None:
                        self._finish(record)
                        continue
                    window.submit(self._run_job, self._start_job())
                if not len(window):
                    break
                for out in window.done():
                    self._finish(self._fold(out))
            interrupted = False
        finally:
            window.close(interrupted)
            self._window = None

    def _may_start(self, window: Window) -> bool:
        reason = self.budget.stop_reason(window.spent(self.budget.spent), candidates=len(self.archive))
        if reason is not None:
            self.stop_reason = reason
        return reason is None

    def _finish(self, record: ProposalRecord) -> None:
        """Fold a finished proposal or merge into the run: its usage, the idle rule, the log, a checkpoint."""
        usage = self._usage_by_iteration.pop(record.iteration, None)
        if usage is not None and not record.usage:
            record = replace(record, usage=usage)
        lost = self.evaluator.replay.expire(upto=record.iteration)    # cut-off calls no redone work asked for
        self.lost_calls += lost
        if self._window is not None:
            self._window.folded(record.iteration, record.budget_at, lost)
        spent_before = self.proposals[-1].budget_at if self.proposals else self._seed_spent()
        self.budget.iteration_finished(spent_before, record.budget_at)
        self.proposals.append(record)
        self.committed.add(record.iteration)
        if record.accepted and record.kind == "reflect":
            self.merge_state = self.merge_state.accepted_reflection()
        self._checkpoint()
        self.progress.show(self.budget.spent, best=self.archive[self.archive.best_index()].val_mean,
                           archive=len(self.archive), cost=self.meter.shown_cost())
        for observe in self.observers:
            observe(self, record)

    def _seed_spent(self) -> int:
        return self.archive[0].discovered_at if len(self.archive) else 0

    def _validate_seed(self) -> None:
        """Score the seed on the whole validation set (each row is logged as it completes: an interrupted seed
        validation resumes with the rows it has, replayed, not run again)."""
        self.progress.note("validating the seed")
        results = self.evaluator.evaluate(self.seed_library, self.val, "seed_validation", tag=0)
        seed = self.archive.add(self.seed_library, (), "seed", results, self.budget.spent, 0)
        require_objectives(self.s.frontier_type, seed.objective_scores)   # gepa's check, on the seed
        self.committed.add(0)
        self.lost_calls += self.evaluator.replay.expire(upto=0)
        self._checkpoint()
        self.progress.note("")

    # -- one reflective proposal: start (loop) -> run (its thread) -> fold (loop) ------------------------
    def _start_job(self) -> Job:
        parent = self.archive[self.selector.select(self.archive, self.rng)]                       # select
        idx = sample_minibatch(self.sampler, [r.example for r in self.train], self.s.minibatch_size, self.rng)
        if not self.reflector.output_names:
            self.reflector.set_output_names(self._output_names(), field_types(self.train[0].inputs))
        lineage = self.archive.ancestors(parent.index) | {parent.index}
        return Job(self.iteration, parent, tuple(self.train[i] for i in idx),
                   recent_history(self.proposals, lineage, self.s.history_size), archive_size=len(self.archive))

    def _run_job(self, job: Job, window: Window) -> JobOutcome:
        """Run one proposal to its end under its own cost ledger, stopping early when the window says so."""
        with self.meter.child() as sub:
            try:
                return self._run_job_steps(job, window)
            finally:
                self._usage_by_iteration[job.iteration] = sub.snapshot()

    def _run_job_steps(self, job: Job, window: Window) -> JobOutcome:
        parent_results = self.evaluator.evaluate(job.parent.library, job.rows, "parent_minibatch", tag=job.iteration)
        if self.s.skip_perfect_score and gate.is_perfect(parent_results, self.s.perfect_score):
            return JobOutcome(job, parent_results, None, None, None)
        if why := window.stop_reason(job, "before reflection", scored=False):
            return JobOutcome(job, parent_results, None, None, None, stopped=why)
        edit = self.reflector.propose(job.parent.library, job.rows, parent_results, job.history)        # reflect
        if edit.rejected:
            return JobOutcome(job, parent_results, edit, None, None)
        if why := window.stop_reason(job, "before its child minibatch"):
            return JobOutcome(job, parent_results, edit, None, None, stopped=why)
        child_results = self.evaluator.evaluate(edit.child, job.rows, "child_minibatch", tag=job.iteration)  # gate
        if not gate.minibatch_gate(parent_results, child_results):
            return JobOutcome(job, parent_results, edit, child_results, None)
        if why := window.stop_reason(job, "before validation", committing=True):
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
        if self._window is not None:
            self._window.archive_changed(self.archive)
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
    def merge_step(self) -> ProposalRecord | None:
        """One merge at the current iteration under its own cost ledger, or None (nothing spent) when no
        eligible pair exists."""
        with self.meter.child() as sub:
            record = self._merge()
        return None if record is None else replace(record, usage=sub.snapshot())

    def _merge(self) -> ProposalRecord | None:
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
        """The budget count to record for the work being folded: when the window counts folded work only, the
        folded count plus this proposal's own scored calls (so records do not depend on what else was in
        flight); otherwise every call charged so far."""
        window = self._window
        if window is None or window.folded_spent is None:
            return self.budget.spent
        return window.folded_spent + self._pending_spend

    def state_dict(self) -> dict[str, Any]:
        """The committed search state, as `state.json` holds it (and `AdaptiveGEPAResult.from_state` reads it)."""
        return {
            "iteration": self.iteration,
            "archive": self.archive.to_list(), "budget": self.budget.report().by_kind,
            "rng": _rng_to_json(self.rng.getstate()), "proposals": [p.to_dict() for p in self.proposals],
            "merge_state": self.merge_state.to_dict(), "usage": self.meter.snapshot(),
            "committed": sorted(self.committed), "lost_calls": self.lost_calls,
            "idle_iterations": self.budget.idle_iterations,
            "val_ids": [r.id for r in self.val], "max_calls": self.budget.max_calls,
            "max_calls_allowed": self.allowed_calls(), "seed": self.s.seed,
            "stop_reason": self.stop_reason, "reproducibility": self.reproducibility(),
            "schedule": self.schedule.to_list(),
        }

    def resume_summary(self, log_dir: Any, pending: int) -> str:
        """What a resumed run says it resumes (after `load_state_dict`): where, and how much was kept."""
        if not len(self.archive):
            return (f"Resuming the seed validation in {log_dir}: {pending} of {len(self.val)} rows were scored "
                    "before the interruption.")
        best = self.archive[self.archive.best_index()].val_mean
        text = (f"Resuming {log_dir}: iteration {self.iteration}, {self.budget.spent} of {self.budget.max_calls} "
                f"scored calls spent ({pending} by interrupted work, kept), {len(self.archive)} candidates (best "
                f"validation mean {best:.3f}).")
        if self.budget.max_calls <= self.budget.spent and self.allowed_before > self.budget.max_calls:
            text += (f" An earlier session allowed {self.allowed_before} scored calls and this one "
                     f"{self.budget.max_calls}, already spent: the run ends here (raise the budget to continue it).")
        return text

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
        self.archive = Archive(tuple(r.id for r in self.val), [Candidate.from_dict(c) for c in state["archive"]],
                               frontier_type=self.s.frontier_type)
        self.budget.restore(state["budget"], state.get("idle_iterations", 0))
        self.rng.setstate(_rng_from_json(state["rng"]))
        self.proposals = [ProposalRecord.from_dict(p) for p in state["proposals"]]
        self.merge_state = MergeState.from_dict(state["merge_state"])
        self.committed = set(state["committed"])
        self.lost_calls = state.get("lost_calls", 0)
        self.allowed_before = int(state.get("max_calls_allowed", state.get("max_calls", 0)) or 0)
        if state.get("seed") is not None and state["seed"] != self.s.seed:   # seed=None: the run's own seed
            self.s = replace(self.s, seed=state["seed"])
        self.schedule.restore(state.get("schedule") or [])

    def _checkpoint(self) -> None:
        if self.store is not None:
            self.store.commit(self.state_dict())


def _rng_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _rng_from_json(data: list) -> tuple:
    version, internal, gauss = data
    return (version, tuple(internal), gauss)
