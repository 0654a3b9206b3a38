"""Run step: execute a candidate library on rows, score each with the metric, record everything.

Each row is scored by `dspy_adaptive.program.scoring.score_example` (the package's one scoring function). One
scored call = one program run on one example plus its metric.

Accounting (paper Appendix L): by default every scoring invocation is executed and charged, also for a
candidate and row scored before: a candidate identical to an archived one is re-measured and may score
differently (the paper's candidates 73 and 74). The LM's own response cache (DSPy's, when the LM has it
on) may still answer the LM calls inside; the invocation is charged all the same. `reuse_scores=True`
is the explicit alternative: results are then reused by (candidate content hash, row id), so an
unchanged candidate is never re-run or re-charged for a row it already has.

Either way `cache` keeps the latest result per (content hash, row id), for the run record and resume.

A resumed run passes the calls its interruption cut off as a `Replay`: a call asked for again -- the same
work unit (tag), candidate and row -- takes the logged result instead of running (it was charged when the run
resumed, and is not logged twice).
Rows run on a thread pool; results come back in row order, so a deterministic LM gives the same
results for any `num_threads`.

DSPy callbacks (`dspy.configure(callbacks=[...])`, e.g. `mlflow.dspy.autolog()`) see every evaluation as a
`dspy.Evaluate` run, as dspy.GEPA's are: full validations carry `callback_metadata={"metric_key": "eval_full"}`,
minibatches and merge checks `{"disable_logging": True}`. With no callback configured nothing extra runs.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

import dspy
from dspy.evaluate.evaluate import EvaluationResult
from dspy.utils.callback import with_callbacks

from dspy_adaptive.data import Row
from dspy_adaptive.lm.preflight import FirstCallsGuard
from dspy_adaptive.program.library import Library
from dspy_adaptive.program.routed import RoutedProgram
from dspy_adaptive.program.scoring import score_example
from dspy_adaptive.schema import BudgetKind, RowResult
from dspy_adaptive.search.budget import Budget
from dspy_adaptive.search.checkpoint import Replay
from dspy_adaptive.search.executor import RowExecutor, ThreadExecutor

#: Called with each scored call as it completes: (tag, candidate content hash, budget kind, result).
OnScored = Callable[[int, str, str, RowResult], None]


class Evaluator:
    """Runs a candidate library through the RoutedProgram on rows and scores them.

    Args:
        reuse_scores: reuse a result already measured for the same (content hash, row id) instead of
            executing and charging the row again (default False: the paper's accounting, every scoring
            invocation executed and charged).
        on_scored: sees every scored call as it completes (the checkpoint log, the progress bar).
        schedule: a `Schedule` recording each evaluation step (perf analysis), or None.
        replay: the calls an interrupted run made and the resumed run may ask for again (see the module
            docstring), or None.
        executor: where rows run (default: a thread pool of `num_threads`).
        guard: watches the session's first scored calls and stops the run when they all fail for a configuration
            reason (`LMSetupError`) or its first evaluation's are all metric faults (`MetricFaultError`;
            `lm.preflight.FirstCallsGuard`); the calls it holds back are logged only once one call comes back
            without such a fault. None: no early stop.
    """

    def __init__(self, base: RoutedProgram, metric: Callable, budget: Budget, *, num_threads: int = 1,
                 failure_score: float = 0.0, keep_outputs: bool = False, format_failure_feedback: bool = False,
                 reuse_scores: bool = False, on_scored: OnScored | None = None, schedule: Any = None,
                 replay: Replay | None = None, executor: RowExecutor | None = None,
                 guard: FirstCallsGuard | None = None):
        self.base = base
        self.keep_outputs = keep_outputs                          # whole outputs (track_best_outputs)
        self.format_failure_feedback = format_failure_feedback    # add_format_failure_as_feedback
        self.metric = metric
        self.budget = budget
        self.failure_score = failure_score
        self.cache: dict[tuple[str, str], RowResult] = {}
        self.on_scored = on_scored
        self.schedule = schedule
        self.replay = replay if replay is not None else Replay()
        self.reuse_scores = reuse_scores
        self.guard = guard
        self.faulty: list[RowResult] = []   # every scored call that failed, or whose metric or router misbehaved
        self.num_threads = max(1, num_threads)
        self.executor: RowExecutor = executor or ThreadExecutor(self.base.with_library, self.score_row,
                                                                self.num_threads)
        self._lock = threading.Lock()

    def close(self, wait: bool = True) -> None:
        """Stop the executor. `wait=False` (an interrupted search): rows not started yet are cancelled and
        the caller does not wait for the ones running (their results are logged as they finish)."""
        if isinstance(self.executor, ThreadExecutor):
            self.executor.close(wait=wait)
        else:
            self.executor.close()

    def evaluate(self, library: Library, rows: Sequence[Row], kind: BudgetKind, tag: int = 0) -> tuple[RowResult, ...]:
        """Results for `rows` in order, executed in parallel and charged to `kind` (with `reuse_scores`, only
        the rows without a result for this content yet). `tag` (the iteration) goes to the eval log so a
        resume can tell committed work from lost work."""
        if dspy.settings.callbacks:   # DSPy callbacks see this evaluation as a dspy.Evaluate run
            run = _CallbackEvaluate(self, library, rows, kind, tag)
            run(self.base.with_library(library), callback_metadata=callback_metadata(kind))
            return run.row_results
        return self._evaluate(library, rows, kind, tag)

    def _evaluate(self, library: Library, rows: Sequence[Row], kind: BudgetKind, tag: int = 0) -> tuple[RowResult, ...]:
        key = library.content_hash
        if not self.reuse_scores:
            return self._execute(library, key, list(rows), kind, tag)
        with self._lock:
            todo = [r for r in rows if (key, r.id) not in self.cache]
        if todo:
            self._execute(library, key, todo, kind, tag)
        with self._lock:
            return tuple(self.cache[(key, r.id)] for r in rows)

    def _execute(self, library: Library, key: str, todo: list[Row], kind: BudgetKind,
                 tag: int) -> tuple[RowResult, ...]:
        """Run and charge every row of `todo` (in order) -- a row an interrupted run already scored for this
        tag is taken from the replay instead -- and remember each result as the latest for its key."""
        if not todo:
            return ()
        replayed = {r.id: res for r in todo if (res := self.replay.take(tag, key, r.id)) is not None}
        run = [r for r in todo if r.id not in replayed]
        fresh: list[RowResult] = []
        if run:
            t0 = time.perf_counter()
            fresh = self.executor.run(library, run, lambda res: self._log(tag, key, kind, res))
            if self.guard is not None:      # may stop the run, or release the calls it held back
                self._logged(self.guard.evaluation_done(replayed.values()))
            if self.schedule is not None:
                depth = max(sum(1 for s in r.steps) for r in fresh)
                self.schedule.record(kind, len(fresh), depth, t0, time.perf_counter())
            self.budget.charge(kind, len(fresh))
        ran = iter(fresh)
        results = tuple(replayed[r.id] if r.id in replayed else next(ran) for r in todo)
        with self._lock:
            for res in results:
                self.cache[(key, res.row_id)] = res
        for res in fresh:
            self.note_fault(res)      # (replayed results were noted when the run resumed)
        return results

    def _log(self, tag: int, key: str, kind: str, res: RowResult) -> None:
        """A scored call came back: to the log (through the first-calls guard, which may hold it back or stop)."""
        self._logged([(tag, key, kind, res)] if self.guard is None else self.guard.admit((tag, key, kind, res), res))

    def _logged(self, items: Sequence[tuple[int, str, str, RowResult]]) -> None:
        if self.on_scored is not None:
            for item in items:
                self.on_scored(*item)

    def note_fault(self, res: RowResult) -> None:
        """Keep a scored call the run record's fault summary counts (each call, re-measurements included)."""
        if res.error or res.metric_note or res.router_unparsed:
            with self._lock:
                self.faulty.append(res)

    def score_row(self, program: RoutedProgram, row: Row) -> RowResult:
        """Score one row (the package's one scoring function, with this run's settings)."""
        return score_example(program, row.example, self.metric, row_id=row.id, failure_score=self.failure_score,
                             predictor_label=program.predictor_label, clip_outputs=not self.keep_outputs,
                             format_failure_feedback=self.format_failure_feedback)


FULL_VALIDATIONS = ("seed_validation", "validation")


def callback_metadata(kind: BudgetKind) -> dict[str, Any]:
    """dspy.GEPA's callback metadata: full validations are logged as "eval_full", the rest not at all."""
    return {"metric_key": "eval_full"} if kind in FULL_VALIDATIONS else {"disable_logging": True}


def as_prediction(result: RowResult) -> dspy.Prediction:
    pred = dspy.Prediction()
    for k, v in (result.output or {}).items():
        pred[k] = v
    return pred


class _CallbackEvaluate(dspy.Evaluate):
    """One Evaluator.evaluate call dressed as a dspy.Evaluate run, so DSPy's callbacks see it (on_evaluate_start
    with the program and callback_metadata; on_evaluate_end with an EvaluationResult whose score is the mean x
    100 and whose results are (example, prediction, score) per row)."""

    def __init__(self, evaluator: Evaluator, library: Library, rows: Sequence[Row], kind: BudgetKind, tag: int):
        super().__init__(devset=[r.example for r in rows], metric=evaluator.metric,
                         num_threads=evaluator.num_threads, failure_score=evaluator.failure_score)
        self._args = (evaluator, library, rows, kind, tag)
        self.row_results: tuple[RowResult, ...] = ()

    @with_callbacks
    def __call__(self, program: Any, metric: Any = None, devset: Any = None, num_threads: Any = None,
                 display_progress: Any = None, display_table: Any = None,
                 callback_metadata: dict[str, Any] | None = None, save_as_csv: Any = None,
                 save_as_json: Any = None) -> EvaluationResult:
        evaluator, library, rows, kind, tag = self._args
        results = evaluator._evaluate(library, rows, kind, tag)
        self.row_results = results
        scored = [(r.example, as_prediction(res), res.score) for r, res in zip(rows, results)]
        mean = sum(res.score for res in results) / len(results) if results else 0.0
        return EvaluationResult(score=round(100 * mean, 2), results=scored)
