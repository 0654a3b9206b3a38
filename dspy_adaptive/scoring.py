"""One scored call: run a program on one example, catch its errors, read its route, call the metric.

`score_example` is the one scoring function of the package: the search's evaluator, the demo command
and the benchmark scripts all score through it, so they agree on every failure:

* the program raises -> a failed rollout: scored `failure_score`, the metric is NOT called, the error is
  recorded (`error`, and `error_kind`: the SpecialistError kind for a sandboxed specialist, otherwise the
  exception's class name);
* the metric raises, or returns something that is not a finite number (None, NaN, a string, a bool) ->
  scored `failure_score` and recorded in `metric_note`; the exception never escapes;
* otherwise the metric's float, or `Prediction(score, feedback)` / `{"score", "feedback"}` (dspy.GEPA's
  feedback-metric contract), is the score and its feedback.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import dspy

from dspy_adaptive.records import MAX_STEPS, RowResult, clip
from dspy_adaptive.routed_program import SpecialistRuntimeError, route_of
from dspy_adaptive.usage import role

PredictorLabel = Callable[[Any], str]


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


def score_example(program: Callable[..., Any], example: dspy.Example, metric: Callable, *, row_id: str | None = None,
                  failure_score: float = 0.0, predictor_label: PredictorLabel | None = None) -> RowResult:
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
        return RowResult(score=failure_score, output=None, error=error, error_kind=kind,
                         feedback=f"The program failed at run time, so it scored {failure_score}: {error}", **common)
    try:
        with role("metric"):
            raw = metric(example, pred, None, None, None)
    except Exception as e:
        raw, note = None, f"metric raised {type(e).__name__}: {clip(str(e), 300)}"
    else:
        note = None
    score, feedback, bad = normalise_metric_output(raw, failure_score)
    output = {k: clip(v) for k, v in pred.items()} if isinstance(pred, dspy.Prediction) else {"output": clip(pred)}
    return RowResult(score=score, feedback=feedback, output=output, error=None, metric_note=note or bad, **common)


def _steps(label: PredictorLabel, trace: list | None) -> list[dict[str, Any]]:
    steps = []
    for predictor, inputs, outputs in trace or []:
        try:
            out = dict(outputs.items())
        except Exception:
            out = {"output": outputs}
        steps.append({
            "predictor": label(predictor),
            "inputs": {k: clip(v, 800) for k, v in dict(inputs).items()},
            "outputs": {k: clip(v, 800) for k, v in out.items()},
        })
    return steps


__all__ = ["normalise_metric_output", "score_example"]
