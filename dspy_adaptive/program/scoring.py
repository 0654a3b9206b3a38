"""One scored call: run a program on one example, catch its errors, read its route, call the metric.

`score_example` is the one scoring function of the package: the search's evaluator, the demo command
and the benchmark scripts all score through it, so they agree on every failure:

* the program raises -> a failed rollout: scored `failure_score`, the metric is NOT called, the error is
  recorded (`error`, and `error_kind`: the SpecialistError kind for a sandboxed specialist, otherwise the
  exception's class name);
* the metric raises, or returns something that is not a finite number (None, NaN, a string) ->
  scored `failure_score` and recorded in `metric_note`; the exception never escapes;
* otherwise the metric's number, or `Prediction(score, feedback)` / `{"score", "feedback"}` (dspy.GEPA's
  feedback-metric contract), is the score and its feedback. As in dspy.GEPA, a number is any real number:
  a bool (`gold.answer == pred.answer` scores 1.0 or 0.0), an int, a float, or a numpy scalar
  (np.float32, np.int64, np.bool_, ...). A `Prediction`'s `objective_scores` (dspy.GEPA's multi-objective
  contract: objective name -> number) are kept on the result.
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any, Callable

import dspy
from dspy.utils.exceptions import AdapterParseError

from dspy_adaptive.lm.usage import role
from dspy_adaptive.program.routed import SpecialistRuntimeError, route_of
from dspy_adaptive.schema import MAX_STEPS, RowResult, clip

PredictorLabel = Callable[[Any], str]


def as_score(value: Any) -> float | None:
    """`value` as a float when it is a real number (bool, int, float, fractions, numpy scalars incl. np.bool_),
    else None. Text is not a number here, even when it reads like one."""
    if isinstance(value, (str, bytes)):
        return None
    if isinstance(value, (bool, numbers.Real)):
        return float(value)
    # numpy scalars (np.bool_ is not registered as numbers.Real) and 0-d arrays: anything numpy-typed that
    # converts to one float
    if type(value).__module__ == "numpy" and getattr(value, "ndim", 0) == 0 and getattr(value, "size", 1) == 1:
        try:
            return float(value)
        except (TypeError, ValueError):
            return None
    return None


def normalise_metric_output(out: Any, failure_score: float) -> tuple[float, str, str | None]:
    """(score, feedback, note). Numbers and Prediction/dict(score, feedback) are accepted; anything else is a
    recorded metric fault scored `failure_score`."""
    feedback = ""
    score = out
    if isinstance(out, dspy.Prediction) or isinstance(out, dict):
        score = out.get("score") if isinstance(out, dict) else getattr(out, "score", None)
        feedback = (out.get("feedback") if isinstance(out, dict) else getattr(out, "feedback", "")) or ""
    value = as_score(score)
    if value is None:
        return failure_score, f"The metric returned {score!r} instead of a number.", \
            f"metric returned a non-numeric score {score!r}"
    if math.isnan(value) or math.isinf(value):
        return failure_score, "The metric returned a non-finite score.", f"metric returned {score!r}"
    return value, str(feedback) if feedback else f"This trajectory got a score of {value}.", None


def objective_scores_of(out: Any) -> dict[str, float] | None:
    """A metric output's `objective_scores` (dspy.GEPA's multi-objective contract) as {name: float}, or None.
    Entries that are not numbers are dropped."""
    raw = out.get("objective_scores") if isinstance(out, (dict, dspy.Prediction)) else None
    if not raw or not hasattr(raw, "items"):
        return None
    scores = {str(k): v for k, v in ((k, as_score(v)) for k, v in raw.items()) if v is not None and math.isfinite(v)}
    return scores or None


def score_example(program: Callable[..., Any], example: dspy.Example, metric: Callable, *, row_id: str | None = None,
                  failure_score: float = 0.0, predictor_label: PredictorLabel | None = None,
                  clip_outputs: bool = True, format_failure_feedback: bool = False) -> RowResult:
    """Run `program(**example.inputs())` and score it with `metric(example, pred, None, None, None)`.

    Args:
        program: any callable DSPy program; a RoutedProgram's route is read from its output (or error).
        example: the gold example; only its input fields reach the program.
        metric: dspy.GEPA's feedback metric `(gold, pred, trace, pred_name, pred_trace)`.
        row_id: the id recorded on the result (default: the example's `id` field, else "").
        failure_score: the score of a failed rollout or a misbehaving metric.
        predictor_label: when given, the call runs under a fresh DSPy trace and its predictor calls are
            recorded in `steps`, named by this function (e.g. `RoutedProgram.predictor_label`): the first
            `records.MAX_STEPS`, the rest counted in `steps_omitted` (the record bounds them further).
        clip_outputs: record the output's fields as clipped text (default); False keeps them whole (JSON values
            as they are, other objects as text), for `track_best_outputs`.
        format_failure_feedback: when the program failed because an LM answer could not be parsed into its
            output fields, put that answer in the feedback (dspy.GEPA's add_format_failure_as_feedback).

    Returns:
        A `RowResult`; never raises for a failing program or metric.
    """
    rid = row_id if row_id is not None else str(example.get("id", ""))
    with dspy.context(trace=[]):
        try:
            pred = program(**example.inputs())
            error = kind = None
        except SpecialistRuntimeError as e:
            pred, error, kind = e, e.route.error, e.route.error_kind
        except Exception as e:  # fallback or router LM failure: a failed rollout, never a crash
            pred, error, kind = e, f"{type(e).__name__}: {clip(str(e), 500)}", type(e).__name__
        trace = list(dspy.settings.trace or []) if predictor_label is not None else []
        steps = tuple(_steps(predictor_label, trace[:MAX_STEPS])) if predictor_label is not None else ()
    route = route_of(pred)
    common = dict(row_id=rid, selected=route.selected if route else None,
                  executed=route.executed if route else None,
                  fallback_reason=route.fallback_reason if route else None, steps=steps,
                  steps_omitted=len(trace) - len(steps))
    if error is not None:
        feedback = f"The program failed at run time, so it scored {failure_score}: {error}"
        if format_failure_feedback:
            feedback += _format_failure(pred)
        return RowResult(score=failure_score, output=None, error=error, error_kind=kind, feedback=feedback, **common)
    try:
        with role("metric"):
            raw = metric(example, pred, None, None, None)
    except Exception as e:
        raw, note = None, f"metric raised {type(e).__name__}: {clip(str(e), 300)}"
    else:
        note = None
    score, feedback, bad = normalise_metric_output(raw, failure_score)
    keep = clip if clip_outputs else _plain
    output = {k: keep(v) for k, v in pred.items()} if isinstance(pred, dspy.Prediction) else {"output": keep(pred)}
    objectives = objective_scores_of(raw) if bad is None else None
    return RowResult(score=score, feedback=feedback, output=output, error=None, metric_note=note or bad,
                     objective_scores=objectives, **common)


def _plain(value: Any) -> Any:
    """`value` itself when it is plain JSON data, else its text."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def _format_failure(exc: Any) -> str:
    """What an AdapterParseError inside `exc` (or its causes) says the LM answered."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, AdapterParseError):
            answer = clip(getattr(exc, "lm_response", None) or "", 1500)
            return (f"\nThe LM's answer could not be parsed into the output fields "
                    f"({clip(str(getattr(exc, 'parsed_result', None) or ''), 300) or 'nothing parsed'}). "
                    f"The LM answered:\n{answer}")
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return ""


def _step_value(value: Any) -> str:
    """A predictor input as recorded text; media (dspy.Image and other dspy.Type values) as a placeholder."""
    items = value if isinstance(value, (list, tuple)) else [value]
    if items and all(isinstance(v, dspy.Type) for v in items):
        return ", ".join(f"[{type(v).__name__.lower()}]" for v in items)
    return clip(value, 800)


def _steps(label: PredictorLabel, trace: list | None) -> list[dict[str, Any]]:
    steps = []
    for predictor, inputs, outputs in trace or []:
        try:
            out = dict(outputs.items())
        except Exception:
            out = {"output": outputs}
        steps.append({
            "predictor": label(predictor),
            "inputs": {k: _step_value(v) for k, v in dict(inputs).items()},
            "outputs": {k: clip(v, 800) for k, v in out.items()},
        })
    return steps


__all__ = ["as_score", "normalise_metric_output", "objective_scores_of", "score_example"]
