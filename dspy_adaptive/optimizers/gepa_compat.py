"""dspy.GEPA's constructor, mapped onto Adaptive-GEPA.

`AdaptiveGEPA` takes every parameter of `dspy.GEPA` 3.4.1 with the same name, default and meaning. This
module holds what that needs beyond the teleprompter itself:

* the budget of `auto` (dspy.GEPA's own formula, on the same numbers, so the same data gives the same
  budget);
* `component_selector`: the default and a callable are accepted (a callable names the component to act on:
  reflection/external.py); gepa's other built-in strings ("all") name a mechanism Adaptive-GEPA replaces and
  raise one clear error, saying why and what to use instead (`instruction_proposer` and `code_proposer` map
  onto the rewrite actions);
* `gepa_kwargs`: each key that has a counterpart here is mapped onto it; every other key raises one clear
  error (dspy.GEPA would pass it to `gepa.optimize`, which Adaptive-GEPA does not run).

Every error is an `InputError` (a ValueError) raised before any LM call, never a bare TypeError.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Mapping

import dspy

from dspy_adaptive.data import InputError
from dspy_adaptive.search.frontier import FRONTIER_TYPES

AUTO_RUN_SETTINGS = {"light": {"n": 6}, "medium": {"n": 12}, "heavy": {"n": 18}}

#: The parameters of dspy.GEPA 3.4.1's constructor (besides self), in its order.
DSPY_GEPA_PARAMETERS = (
    "metric", "auto", "max_full_evals", "max_metric_calls", "reflection_minibatch_size",
    "candidate_selection_strategy", "reflection_lm", "skip_perfect_score", "add_format_failure_as_feedback",
    "instruction_proposer", "code_proposer", "component_selector", "use_merge", "max_merge_invocations",
    "num_threads", "failure_score", "perfect_score", "log_dir", "track_stats", "use_wandb", "wandb_api_key",
    "wandb_init_kwargs", "track_best_outputs", "warn_on_score_mismatch", "use_mlflow", "seed", "gepa_kwargs",
)


class MetricSignatureError(InputError, TypeError):
    """The metric does not take dspy.GEPA's five arguments. A TypeError too, as dspy.GEPA raises one."""


class EmptyTrainsetError(InputError, AssertionError):
    """compile() got no trainset. An AssertionError too, as dspy.GEPA's `assert` raises one."""


def auto_budget(auto: str, num_components: int, valset_size: int) -> int:
    """dspy.GEPA's budget for `auto` on a program with `num_components` optimisable components (its
    predictors plus dspy.Flex submodules) and a validation set of `valset_size` rows (the trainset's size
    when no valset is given): the very formula dspy.GEPA.auto_budget computes."""
    from dspy.teleprompt.gepa.gepa import GEPA

    return GEPA.auto_budget(None, num_preds=max(num_components, 1), num_candidates=AUTO_RUN_SETTINGS[auto]["n"],
                            valset_size=valset_size)


def program_components(program: dspy.Module) -> int:
    """How many components dspy.GEPA would optimise in `program`: its named predictors and Flex submodules."""
    try:
        from dspy.teleprompt.gepa.gepa_flex_utils import enumerate_flex_submodules
        flex = len(enumerate_flex_submodules(program))
    except Exception:  # noqa: BLE001 - a program dspy cannot walk: count predictors only
        flex = 0
    try:
        preds = len(program.named_predictors())
    except Exception:  # noqa: BLE001
        preds = 0
    return preds + flex


# -- replaced mechanisms ------------------------------------------------------------------------------

_REPLACED = {
    "instruction_proposer": (
        "dspy.GEPA's instruction_proposer rewrites one predictor's instruction at a time; Adaptive-GEPA does not "
        "evolve predictor instructions but a library (router instruction, specialist descriptions and specialist "
        "programs), written by its own typed reflection calls on `reflection_lm`. Pass a strong reflection_lm "
        "instead; to optimise the instructions of a single program, run dspy.GEPA on it (it can also run on the "
        "RoutedProgram this optimizer returns)."),
    "code_proposer": (
        "dspy.GEPA's code_proposer rewrites dspy.Flex submodules; Adaptive-GEPA writes its specialists' programs "
        "with its own reflection calls (they run in its sandbox, whose contract the prompt states). Pass a strong "
        "reflection_lm instead."),
    "component_selector": (
        "dspy.GEPA's built-in selectors cycle through or update all predictors at once; in Adaptive-GEPA one "
        "proposal is one action on one target (activate, rewrite_program, rewrite_description, rewrite_router, "
        "deactivate), chosen by the reflection LM from the traces. Leave component_selector at its default "
        "('round_robin'), or pass a callable that names the component to act on "
        "(dspy_adaptive.reflection.external)."),
}


def check_replaced(name: str, value: Any, default: Any) -> None:
    if value is default or (isinstance(value, str) and value == default):
        return
    raise InputError(f"{name}={_short(value)} is not supported by AdaptiveGEPA: {_REPLACED[name]}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# -- gepa_kwargs -------------------------------------------------------------------------------------

@dataclass
class MappedGepaKwargs:
    """What `gepa_kwargs` maps onto."""

    use_mlflow: bool = False
    mlflow_tracking_uri: str | None = None
    mlflow_experiment_name: str | None = None
    mlflow_attach_existing: bool = False
    wandb_attach_existing: bool = False
    tracking_key_prefix: str = ""
    display_progress_bar: bool | None = None
    frontier_type: str = "instance"
    notes: list[str] = field(default_factory=list)


#: gepa.optimize arguments dspy.GEPA sets itself from its own parameters (or never exposes).
_SET_BY_PARAMETER = {
    "seed_candidate": None, "trainset": None, "valset": None, "adapter": None, "task_lm": None, "evaluator": None,
    "reflection_lm": "reflection_lm", "candidate_selection_strategy": "candidate_selection_strategy",
    "skip_perfect_score": "skip_perfect_score", "reflection_minibatch_size": "reflection_minibatch_size",
    "perfect_score": "perfect_score", "custom_candidate_proposer": "instruction_proposer",
    "module_selector": "component_selector", "use_merge": "use_merge",
    "max_merge_invocations": "max_merge_invocations", "max_metric_calls": "max_metric_calls",
    "logger": None, "run_dir": "log_dir", "use_wandb": "use_wandb", "wandb_api_key": "wandb_api_key",
    "wandb_init_kwargs": "wandb_init_kwargs", "track_best_outputs": "track_best_outputs", "seed": "seed",
    "raise_on_exception": None,
}

_NO_COUNTERPART = {
    "max_reflection_cost": ("is not supported (nor by dspy.GEPA (DSPy LMs do not report the running cost "
                            "gepa needs); AdaptiveGEPA's max_cost_usd stops the search on the total USD cost of "
                            "every role, reflection included"),
    "reflection_prompt_template": ("cannot be passed via gepa_kwargs (as in dspy.GEPA); Adaptive-GEPA's reflection "
                                   "prompts are typed DSPy signatures of its own"),
    "stop_callbacks": ("reads gepa's engine state, which Adaptive-GEPA does not have; stop on "
                       "max_metric_calls and/or max_cost_usd"),
    "batch_sampler": ("is gepa's sampler protocol; pass AdaptiveGEPA(batch_sampler=fn) with "
                      "fn(examples, size, rng) -> indices instead"),
    "merge_val_overlap_floor": ("has no counterpart: every archived candidate is validated on the whole valset, "
                                "so merge parents always share every validation row"),
    "sampling_strategy": "has no counterpart: use max_concurrent_proposals for proposals in flight at once",
    "selection_strategy": "has no counterpart: proposals are gated on their minibatch, then fully validated",
    "reflection_strategy": "has no counterpart: reflection is Adaptive-GEPA's typed action selection and edit",
    "reflection_lm_kwargs": "has no counterpart: configure the dspy.LM you pass as reflection_lm",
    "callbacks": ("has no counterpart (gepa's engine callbacks); DSPy callbacks (dspy.configure(callbacks=...)) "
                  "see every full validation as an evaluation run"),
}


def map_gepa_kwargs(gepa_kwargs: Mapping[str, Any] | None) -> MappedGepaKwargs:
    """Map dspy.GEPA's `gepa_kwargs` onto AdaptiveGEPA, or raise one InputError naming the key and why."""
    out = MappedGepaKwargs()
    if gepa_kwargs is None:
        return out
    if not isinstance(gepa_kwargs, Mapping):
        raise InputError(f"gepa_kwargs must be a dict, got {type(gepa_kwargs).__name__}")
    for key, value in gepa_kwargs.items():
        if key == "max_reflection_cost" and value is None:
            continue   # not set (dspy.GEPA accepts None too)
        if key in ("use_mlflow", "mlflow_attach_existing", "wandb_attach_existing"):
            setattr(out, key, bool(value))
        elif key in ("mlflow_tracking_uri", "mlflow_experiment_name"):
            setattr(out, key, None if value is None else str(value))
        elif key == "tracking_key_prefix":
            out.tracking_key_prefix = str(value or "")
        elif key == "display_progress_bar":
            out.display_progress_bar = bool(value)
        elif key in ("use_cloudpickle", "cache_evaluation"):
            out.notes.append(f"gepa_kwargs[{key!r}] has no effect: Adaptive-GEPA's state is JSON and every scored "
                             "call is cached by (candidate, row)")
        elif key == "frontier_type":
            if value not in FRONTIER_TYPES:
                raise InputError(f"gepa_kwargs['frontier_type']={_short(value)} is not one of gepa's frontiers: "
                                 f"{', '.join(map(repr, FRONTIER_TYPES))} (all but 'instance' need a metric that "
                                 "returns objective_scores)")
            out.frontier_type = value
        elif key in ("val_evaluation_policy", "acceptance_criterion"):
            allowed = {"val_evaluation_policy": (None, "full_eval"),
                       "acceptance_criterion": ("strict_improvement",)}[key]
            if value not in allowed:
                what = {"val_evaluation_policy": "validates every archived candidate on the whole valset",
                        "acceptance_criterion": "accepts a child only when it strictly beats its parent on the "
                                                "minibatch"}[key]
                raise InputError(f"gepa_kwargs[{key!r}]={_short(value)} is not supported: Adaptive-GEPA {what} "
                                 f"(accepted: {', '.join(map(repr, allowed))})")
        elif key in _SET_BY_PARAMETER:
            param = _SET_BY_PARAMETER[key]
            hint = f"pass it as AdaptiveGEPA({param}=...)" if param else "AdaptiveGEPA sets it itself"
            raise InputError(f"gepa_kwargs[{key!r}] is set from the optimizer's own parameters, as in dspy.GEPA: "
                             f"{hint}")
        elif key in _NO_COUNTERPART:
            raise InputError(f"gepa_kwargs[{key!r}] {_NO_COUNTERPART[key]}")
        else:
            known = sorted(set(_gepa_optimize_parameters()) | {"use_mlflow"})
            raise InputError(f"gepa_kwargs[{key!r}] is not an argument of gepa.optimize "
                             f"(its arguments: {', '.join(known)})")
    return out


def _gepa_optimize_parameters() -> tuple[str, ...]:
    try:
        import gepa
        return tuple(inspect.signature(gepa.optimize).parameters)
    except Exception:  # noqa: BLE001
        return ()


__all__ = ["AUTO_RUN_SETTINGS", "DSPY_GEPA_PARAMETERS", "EmptyTrainsetError", "MappedGepaKwargs",
           "MetricSignatureError", "auto_budget", "check_replaced", "map_gepa_kwargs", "program_components"]
