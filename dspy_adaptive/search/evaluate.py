"""Run step: execute a candidate library on rows, score each with the metric, record everything.

One scored call = one program run on one example plus its metric. Results are cached by
(candidate content hash, row id): an unchanged candidate is never re-run or re-charged for a row
it already has. Rows run on a thread pool; results come back in row order, so a deterministic LM
gives the same results for any `num_threads`.
"""

from __future__ import annotations

import contextvars
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import dspy

from dspy_adaptive.data import Row
from dspy_adaptive.library import Library
from dspy_adaptive.routed_program import RoutedProgram, SpecialistRuntimeError, route_of
from dspy_adaptive.search.budget import Budget
from dspy_adaptive.usage import role

MAX_FIELD_CHARS = 2000


def _clip(value: Any, limit: int = MAX_FIELD_CHARS) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


@dataclass(frozen=True)
class RowResult:
    """Everything the search keeps about one scored call."""

    row_id: str
    score: float
    feedback: str
    output: dict[str, str] | None
    selected: int | None
    executed: int | None          # None: the route is unknown (the call failed before routing)
    fallback_reason: str | None
    error: str | None             # runtime failure (scored failure_score without calling the metric)
    steps: tuple[dict[str, Any], ...]
    metric_note: str | None = None  # the metric misbehaved (None/NaN/str...): recorded, scored as failure

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["steps"] = list(self.steps)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RowResult":
        d = dict(d)
        d["steps"] = tuple(d.get("steps") or ())
        return cls(**d)


def normalise_metric_output(out: Any, failure_score: float) -> tuple[float, str, str | None]:
    """(score, feedback, note). Floats and Prediction/dict(score, feedback) are accepted; anything else is a
    recorded metric fault scored `failure_score`."""
    feedback = ""
    score = out
    if isinstance(out, dspy.Prediction) or isinstance(out, dict):
        score = out.get("score") if isinstance(out, dict) else getattr(out, "score", None)
        feedback = (out.get("feedback") if isinstance(out, dict) else getattr(out, "feedback", "")) or ""
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        return failure_score, f"The metric returned {score!r} instead of a number.", \
            f"metric returned a non-numeric score {score!r}"
    if math.isnan(score) or math.isinf(score):
        return failure_score, "The metric returned a non-finite score.", f"metric returned {score!r}"
    score = float(score)
    return score, str(feedback) if feedback else f"This trajectory got a score of {score}.", None


class Evaluator:
    """Runs a candidate library through the RoutedProgram on rows and scores them."""

    def __init__(self, base: RoutedProgram, metric: Callable, budget: Budget, *, num_threads: int = 1,
                 failure_score: float = 0.0, cache: dict[tuple[str, str], RowResult] | None = None,
                 on_new_result: Callable[[int, str, RowResult], None] | None = None):
        self.base = base
        self.metric = metric
        self.budget = budget
        self.failure_score = failure_score
        self.cache = cache if cache is not None else {}
        self.on_new_result = on_new_result
        self.num_threads = max(1, num_threads)
        self._pool = ThreadPoolExecutor(max_workers=self.num_threads, thread_name_prefix="adaptive-eval") \
            if self.num_threads > 1 else None
        self._lock = threading.Lock()
        self.schedule = None  # a search.schedule.Schedule, when the caller wants the step record

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def evaluate(self, library: Library, rows: Sequence[Row], kind: str, tag: int = 0) -> tuple[RowResult, ...]:
        """Results for `rows` in order; uncached rows are executed in parallel and charged to `kind`.
        `tag` (the iteration) goes to the eval log so a resume can tell committed work from lost work."""
        key = library.content_hash
        with self._lock:
            todo = [r for r in rows if (key, r.id) not in self.cache]
        if todo:
            program = self.base.with_library(library)
            t0 = time.perf_counter()
            fresh = self._map(lambda r: self._score_and_log(program, r, tag, key), todo)
            if self.schedule is not None:
                depth = max(sum(1 for s in r.steps) for r in fresh)
                self.schedule.record(kind, len(fresh), depth, t0, time.perf_counter())
            self.budget.charge(kind, len(fresh))
            with self._lock:
                for res in fresh:
                    self.cache[(key, res.row_id)] = res
        with self._lock:
            return tuple(self.cache[(key, r.id)] for r in rows)

    def _map(self, fn: Callable[[Row], RowResult], rows: list[Row]) -> list[RowResult]:
        if self._pool is None or len(rows) == 1:
            return [fn(r) for r in rows]
        futures = [self._pool.submit(contextvars.copy_context().run, fn, r) for r in rows]
        return [f.result() for f in futures]

    def _score_and_log(self, program: RoutedProgram, row: Row, tag: int, key: str) -> RowResult:
        """Score one row and log it at once: a kill mid-batch must not hide calls already made."""
        res = self._score_row(program, row)
        if self.on_new_result is not None:
            self.on_new_result(tag, key, res)
        return res

    def _score_row(self, program: RoutedProgram, row: Row) -> RowResult:
        with dspy.context(trace=[]):
            try:
                pred = program(**row.inputs)
                error = None
            except SpecialistRuntimeError as e:
                pred, error = e, e.route.error
            except Exception as e:  # fallback or router LM failure: a failed rollout, never a crash
                pred, error = e, f"{type(e).__name__}: {_clip(str(e), 500)}"
            steps = tuple(self._steps(program, dspy.settings.trace))
        route = route_of(pred)
        common = dict(row_id=row.id, selected=route.selected if route else None,
                      executed=route.executed if route else None,
                      fallback_reason=route.fallback_reason if route else None, steps=steps)
        if error is not None:
            return RowResult(score=self.failure_score, output=None, error=error,
                             feedback=f"The program failed at run time, so it scored {self.failure_score}: {error}",
                             **common)
        try:
            with role("metric"):
                raw = self.metric(row.example, pred, None, None, None)
        except Exception as e:
            raw, note = None, f"metric raised {type(e).__name__}: {_clip(str(e), 300)}"
        else:
            note = None
        score, feedback, bad = normalise_metric_output(raw, self.failure_score)
        output = {k: _clip(v) for k, v in pred.items()} if isinstance(pred, dspy.Prediction) else {"output": _clip(pred)}
        return RowResult(score=score, feedback=feedback, output=output, error=None,
                         metric_note=note or bad, **common)

    @staticmethod
    def _steps(program: RoutedProgram, trace: list | None) -> list[dict[str, Any]]:
        steps = []
        for predictor, inputs, outputs in trace or []:
            try:
                out = dict(outputs.items())
            except Exception:
                out = {"output": outputs}
            steps.append({
                "predictor": program.predictor_label(predictor),
                "inputs": {k: _clip(v, 800) for k, v in dict(inputs).items()},
                "outputs": {k: _clip(v, 800) for k, v in out.items()},
            })
        return steps
