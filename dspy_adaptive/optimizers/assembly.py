"""The one run assembly: what AdaptiveGEPA and the OpenEndedOptimizer search with, and what a Ray actor scores
rows with -- the routed program over the user's program, its sandbox pool, the budget, the cost ledger, the
evaluator, the checkpoint store with its resume, the schedule and the progress bar.

    run = assemble(spec, budget=..., log_dir=..., identity=...)   # nothing is scored yet; log_dir is this run's
    with run.holding_log_dir():     # until the record is written; then log_dir is free (search.checkpoint.DirLock)
        with run:                   # closes rows, store and (on error) the pool
            ... search with run.evaluator / run.services ...
        routed = run.returned(best_library)        # the program handed to the user (owns the pool)
        ... write the record into log_dir ...

The run's identity -- everything that changes its results -- is written before the first scored call; a
rerun on the same log_dir with anything different is refused, naming what differs, and so is a run into a log_dir
another live run holds (`LogDirInUseError`; see search.checkpoint).
Then every LM role is checked (`lm.preflight.check_lms`), and the evaluator's guard stops a run whose first
scored calls all fail for a configuration reason, or whose first evaluation's metric faulted on every call: an LM
that cannot be used costs nothing but its check, and neither leaves files that would refuse the corrected rerun
(`CheckpointStore.discard_unused`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import dspy

from dspy_adaptive.data import Row
from dspy_adaptive.lm.preflight import (
    FirstCallsGuard,
    LMSetupError,
    MetricFaultError,
    check_lms,
    lm_roles,
    lms_inside,
)
from dspy_adaptive.lm.usage import UsageMeter, current_meter
from dspy_adaptive.optimizers.terminate import sigterm_as_interrupt
from dspy_adaptive.program.library import Library
from dspy_adaptive.program.route_memo import RouteMemo
from dspy_adaptive.program.routed import RoutedProgram
from dspy_adaptive.program.settings import ProgramSettings
from dspy_adaptive.sandbox import SandboxPool
from dspy_adaptive.sandbox.settings import SandboxSettings
from dspy_adaptive.schema import RowResult
from dspy_adaptive.search.budget import Budget
from dspy_adaptive.search.checkpoint import CheckpointStore, Replay, Resume
from dspy_adaptive.search.engine import RunServices
from dspy_adaptive.search.evaluate import Evaluator
from dspy_adaptive.search.execution import ExecutionSettings
from dspy_adaptive.search.progress import SearchProgress
from dspy_adaptive.search.schedule import Schedule

SECRET_HINTS = ("key", "secret", "password", "auth", "credential", "token")


@dataclass(frozen=True)
class RunSpec:
    """What a run scores with: the user's program and metric, the request's input fields, and the settings
    of the program, the sandbox and the executor (all a Ray actor needs to score rows, picklable)."""

    student: dspy.Module
    metric: Callable
    input_names: tuple[str, ...]
    program: ProgramSettings
    sandbox: SandboxSettings
    execution: ExecutionSettings
    failure_score: float = 0.0
    keep_outputs: bool = False              # whole outputs (track_best_outputs)
    format_failure_feedback: bool = False   # add_format_failure_as_feedback
    reuse_scores: bool = False


@dataclass(frozen=True)
class BudgetLimits:
    max_calls: int
    max_cost_usd: float | None = None
    max_idle_iterations: int | None = None
    max_candidates: int | None = None


def build_program(spec: RunSpec, *, max_workers: int, route_memo: RouteMemo | None) -> RoutedProgram:
    """The run's base program over an empty library, with a sandbox pool of its own (the caller closes it)."""
    tools = tuple(spec.program.tools)
    pool = spec.sandbox.pool(max_workers=max_workers, tool_names=tools)
    return spec.program.base(spec.student, input_names=spec.input_names, sandbox=pool, route_memo=route_memo)


def evaluator_for(spec: RunSpec, base: RoutedProgram, budget: Budget, **kwargs: Any) -> Evaluator:
    """The evaluator of `spec`'s scoring settings over `base` (kwargs: threads, callbacks, replay, executor)."""
    return Evaluator(base, spec.metric, budget, failure_score=spec.failure_score, keep_outputs=spec.keep_outputs,
                     format_failure_feedback=spec.format_failure_feedback, reuse_scores=spec.reuse_scores,
                     **kwargs)


def actor_scorer(spec: RunSpec) -> tuple[RoutedProgram, Callable[[RoutedProgram, Row], RowResult]]:
    """Inside a Ray actor: the run's base program with a sandbox pool of its own, and its row scorer."""
    base = build_program(spec, max_workers=2,
                         route_memo=RouteMemo() if spec.execution.route_memo else None)   # filled per batch
    return base, evaluator_for(spec, base, Budget(1)).score_row


@dataclass
class AssembledRun:
    """An assembled run (see the module docstring)."""

    spec: RunSpec
    base: RoutedProgram
    services: RunServices
    resume: Resume
    threads: int
    _signals: Any = dataclasses.field(default=None, init=False, repr=False)

    @property
    def evaluator(self) -> Evaluator:
        return self.services.evaluator

    @property
    def budget(self) -> Budget:
        return self.services.budget

    @property
    def meter(self) -> UsageMeter:
        return self.services.meter

    @property
    def store(self) -> CheckpointStore | None:
        return self.services.store

    @property
    def pool(self) -> SandboxPool:
        return self.base.sandbox

    def restore(self, load_state: Callable[[dict[str, Any]], None]) -> bool:
        """Resume what the log_dir holds: the committed state (through `load_state`), the results of committed
        scored calls, and the pending calls of interrupted work, charged again at once (they were paid for) and
        replayed when asked for again. True when there was anything to resume."""
        r = self.resume
        if r.state is not None:
            load_state(r.state)
            self.meter.restore(r.state.get("usage", {}))
        for call in r.committed:
            self.evaluator.cache[(call.key, call.result.row_id)] = call.result
            self.evaluator.note_fault(call.result)
        for call in r.pending:
            self.budget.charge(call.kind)
            self.evaluator.note_fault(call.result)
        return r.resumed

    def returned(self, library: Library) -> RoutedProgram:
        """The program handed to the user: `library` over the user's program, owning the sandbox pool, with no
        route memo (a deployed program calls its router every time)."""
        return self.base.with_library(library, owns_sandbox=True, route_memo=None)

    def __enter__(self) -> "AssembledRun":
        """While the run is inside, SIGTERM stops it as Ctrl-C does (`optimizers.terminate`)."""
        self._signals = sigterm_as_interrupt()
        self._signals.__enter__()
        return self

    def prepare_pool(self, *, strict: bool) -> None:
        """Start the sandbox pool: measured first and refused when `strict` and a layer is missing (before any LM
        money is spent; log_dir is given up then), else started in the background."""
        try:
            if strict:
                self.pool.isolation_report()
            else:
                self.pool.prestart()
        except BaseException:
            self.release()
            raise

    @contextlib.contextmanager
    def holding_log_dir(self) -> Iterator["AssembledRun"]:
        """The run's whole life after it was built -- resume, search, record: log_dir is given up when it ends, in
        whatever way (`release`)."""
        try:
            yield self
        finally:
            self.release()

    def release(self) -> None:
        """Give log_dir up, once the run is over and its record written (`holding_log_dir` does it). A run never
        released gives it up when it is garbage-collected, or when its process ends."""
        if self.store is not None:
            self.store.release()

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        """Stop the rows (interrupted: rows not started are dropped, not run first) and close the store (a run
        stopped for an unusable LM, or for a metric that faulted on every call, before it logged anything leaves
        no files behind)."""
        signals, self._signals = self._signals, None
        if signals is not None:
            signals.__exit__(None, None, None)
        self.evaluator.close(wait=exc_type is None)
        if self.store is not None:
            self.store.close()
            if exc_type is not None and issubclass(exc_type, (LMSetupError, MetricFaultError)):
                self.store.discard_unused()


def assemble(spec: RunSpec, *, limits: BudgetLimits, log_dir: str | None, identity: Mapping[str, Any],
             what: str = "run", progress: bool = False, progress_desc: str = "Adaptive-GEPA",
             lms: Mapping[str, Any] | None = None) -> AssembledRun:
    """Build a run: program and pool, cost ledger, budget, checkpoint store (opened: log_dir is taken for this
    run, and a live run in it or another run's files are refused here, before anything is scored), the check of
    every LM role (`lms`: the roles the program does not name, e.g. {"reflection_lm": lm}), evaluator with the
    replay of interrupted work and the first-calls guard, schedule and progress bar. The caller releases the run
    (`AssembledRun.release`); if building it fails, log_dir is released here."""
    threads = spec.execution.threads()
    store = CheckpointStore(log_dir, identity, what=what) if log_dir else None
    resume = store.open() if store is not None else Resume(None)
    try:
        return _assemble(spec, threads, limits, store, resume, progress, progress_desc, lms)
    except BaseException:
        if store is not None:
            store.release()
        raise


def _assemble(spec: RunSpec, threads: int, limits: BudgetLimits, store: CheckpointStore | None, resume: Resume,
              progress: bool, progress_desc: str, lms: Mapping[str, Any] | None) -> AssembledRun:
    roles = lm_roles(fast_lm=spec.program.fast_lm, deep_lm=spec.program.deep_lm, student=spec.student,
                     metric=spec.metric, extra=lms)
    try:
        check_lms(roles)
    except LMSetupError:
        if store is not None:
            store.discard_unused()
        raise
    journal = store.append_route if store is not None else None     # a resumed run starts from what it learnt
    base = build_program(spec, max_workers=max(2, threads),
                         route_memo=RouteMemo(dict(resume.routes), journal) if spec.execution.route_memo else None)
    meter = UsageMeter()
    budget = Budget(limits.max_calls, max_cost_usd=limits.max_cost_usd, cost=meter.total_cost,
                    max_idle_iterations=limits.max_idle_iterations, max_candidates=limits.max_candidates)
    bar, schedule = SearchProgress(progress, progress_desc), Schedule()

    def on_scored(tag: int, key: str, kind: str, result: RowResult) -> None:
        if store is not None:
            store.append_eval(tag, key, kind, result)    # logged at once: a kill mid-batch hides nothing
        bar.tick()

    executor = _ray_executor(spec, threads, meter, base) if spec.execution.executor == "ray" else None
    evaluator = evaluator_for(spec, base, budget, num_threads=threads, on_scored=on_scored, schedule=schedule,
                              replay=Replay(resume.pending), executor=executor, guard=FirstCallsGuard(roles))
    return AssembledRun(spec, base, RunServices(evaluator, budget, meter, store, schedule, bar), resume, threads)


def _ray_executor(spec: RunSpec, threads: int, meter: UsageMeter, base: RoutedProgram) -> Any:
    """Ray actors that each rebuild this run's base program and score rows as the thread executor would. What
    they receive is refused before Ray starts if it cannot be pickled, and the user's own modules it comes
    from are shipped to them (`search.ray_executor`)."""
    from dspy_adaptive.search.ray_executor import RayExecutor, refuse_unpicklable, user_modules

    settings = {"lm": dspy.settings.lm, "adapter": dspy.settings.adapter}
    sent = {"metric": spec.metric, "student program": spec.student, "fast_lm": spec.program.fast_lm,
            "deep_lm": spec.program.deep_lm, "configured LM (dspy.settings.lm)": settings["lm"],
            "configured adapter (dspy.settings.adapter)": settings["adapter"],
            **{f"tool {name!r}": fn for name, fn in spec.program.tools.items()}}
    refuse_unpicklable(sent)
    build = functools.partial(actor_scorer, spec)
    refuse_unpicklable({"run's settings": build})
    defined = [*sent.values(), *(type(m) for _, m in spec.student.named_sub_modules())]
    defined += [getattr(lm, "engine", None) for lm in (spec.program.fast_lm, spec.program.deep_lm, settings["lm"])]

    def on_usage(snapshot: dict[str, Any]) -> None:     # into the proposal's ledger too, when one is open
        (current_meter() or meter).merge(snapshot)

    return RayExecutor(build, num_actors=threads, address=spec.execution.address,
                       failure_score=spec.failure_score, on_usage=on_usage, settings=settings,
                       num_cpus=max(2, threads), route_memo=lambda: base.route_memo,
                       ship=user_modules(o for o in defined if o is not None))


# -- the run's identity ----------------------------------------------------------------------------------------

def describe_lm(lm: Any) -> Any:
    """What about an LM changes a run's results: its class, model and settings (secrets left out)."""
    if lm is None:
        return None
    kwargs = getattr(lm, "kwargs", None) or {}
    settings = {k: v for k, v in sorted(kwargs.items())
                if not any(h in k.lower() for h in SECRET_HINTS) or k in ("max_tokens", "max_completion_tokens")}
    return {"class": type(lm).__qualname__, "model": getattr(lm, "model", None),
            "settings": json.loads(json.dumps(settings, default=str))}


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def rows_identity(rows: Sequence[Row]) -> str:
    return f"{len(rows)} rows, ids sha256 {digest([r.id for r in rows])}"


def program_identity(student: dspy.Module) -> str:
    try:
        state = json.dumps(student.dump_state(), sort_keys=True, default=str)
    except Exception:  # noqa: BLE001 - a program that cannot dump its state is known by its repr
        state = repr(student)
    return f"{type(student).__qualname__}, state sha256 {digest(state)}"


def spec_identity(spec: RunSpec, train: Sequence[Row], val: Sequence[Row]) -> dict[str, Any]:
    """The identity every run shares: program, metric (and the LMs it holds, a judge), data, slots, LMs (the
    configured one where a profile has none), tools, sandbox limits and scoring."""
    configured = dspy.settings.lm
    p = spec.program
    return {
        "program": program_identity(spec.student),
        "metric": f"{getattr(spec.metric, '__module__', '?')}.{getattr(spec.metric, '__qualname__', '?')}",
        "metric_lms": {path: describe_lm(lm) for path, lm in lms_inside(spec.metric)},   # a judge changes scores
        "trainset": rows_identity(train), "valset": rows_identity(val),
        "max_specialists": p.max_specialists, "tools": sorted(p.tools),
        "fast_lm": describe_lm(p.fast_lm if p.fast_lm is not None else configured),
        "deep_lm": describe_lm(p.deep_lm if p.deep_lm is not None else configured),
        "sandbox": dataclasses.asdict(spec.sandbox),
        "scoring": {"failure_score": spec.failure_score, "reuse_scores": spec.reuse_scores,
                    "format_failure_feedback": spec.format_failure_feedback},
    }
