"""AdaptiveGEPA's flat constructor (dspy.GEPA's parameters, then Adaptive-GEPA's own) mapped onto settings
grouped by their owner. Each group validates itself next to the constants it checks (search, merge,
reflection, execution, program, sandbox); what spans groups or belongs to the run as a whole is checked here.
Every error is an `InputError` raised before any LM call.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from dspy_adaptive import checks
from dspy_adaptive.data import InputError
from dspy_adaptive.merge.settings import MergeSettings
from dspy_adaptive.optimizers.assembly import describe_lm
from dspy_adaptive.optimizers.gepa_compat import (
    AUTO_RUN_SETTINGS,
    MetricSignatureError,
    auto_budget,
    check_replaced,
    map_gepa_kwargs,
    program_components,
)
from dspy_adaptive.program.settings import ProgramSettings
from dspy_adaptive.record.tracking import TrackingSettings
from dspy_adaptive.reflection.settings import ReflectionSettings
from dspy_adaptive.sandbox.settings import SandboxSettings
from dspy_adaptive.search.execution import ExecutionSettings
from dspy_adaptive.search.sampling import BatchSampler, uniform_sampler
from dspy_adaptive.search.settings import SearchSettings


@dataclass(frozen=True)
class BudgetSettings:
    """Exactly one of auto / max_full_evals / max_metric_calls (dspy.GEPA's budget words), plus Adaptive-GEPA's
    limits: `max_cost_usd` stops on cost as on the budget (no new iteration starts once the LM cost of every
    role -- router, specialists, fallback, reflection, metric/judge; litellm's list prices -- reaches it);
    `max_idle_iterations` stops after this many iterations in a row that spend no scored call; `max_candidates`
    stops once the archive holds this many candidates, the seed included (the paper's "candidate budget", 100;
    None: no cap). The budget's size and these limits may change on resume."""

    auto: str | None = None
    max_full_evals: int | None = None
    max_metric_calls: int | None = None
    max_cost_usd: float | None = None
    max_idle_iterations: int = 20
    max_candidates: int | None = None

    def __post_init__(self) -> None:
        given = [x is not None for x in (self.auto, self.max_full_evals, self.max_metric_calls)]
        if sum(given) != 1:
            raise InputError("Set exactly one of auto, max_full_evals, max_metric_calls "
                             f"(got auto={self.auto!r}, max_full_evals={self.max_full_evals!r}, "
                             f"max_metric_calls={self.max_metric_calls!r}).")
        if self.auto is not None:
            checks.one_of("auto", self.auto, sorted(AUTO_RUN_SETTINGS))
        checks.integer("max_full_evals", self.max_full_evals, optional=True)
        checks.integer("max_metric_calls", self.max_metric_calls, optional=True)
        checks.positive_number("max_cost_usd", self.max_cost_usd, optional=True, unit="US dollars")
        checks.integer("max_idle_iterations", self.max_idle_iterations)
        checks.integer("max_candidates", self.max_candidates, minimum=2, optional=True,
                       none_means="no cap; at least the seed and one more")

    def calls(self, student: Any, n_train: int, n_val: int) -> int:
        """Scored calls allowed: max_metric_calls; max_full_evals x (trainset + valset), as dspy.GEPA counts it
        (valset 0 when none is given); or dspy.GEPA's own `auto` budget for this program and data."""
        if self.max_metric_calls is not None:
            return self.max_metric_calls
        if self.max_full_evals is not None:
            return self.max_full_evals * (n_train + n_val)
        return auto_budget(self.auto, program_components(student), n_val or n_train)


@dataclass(frozen=True)
class RunSettings:
    """What belongs to the run as a whole: scoring, accounting, record, seed, progress."""

    failure_score: float = 0.0
    perfect_score: float = 1.0
    reuse_scores: bool = False
    log_dir: str | None = None
    track_stats: bool = False
    track_best_outputs: bool = False
    progress: bool = True
    seed: int | None = 0
    distill_router: Any = False                 # False, True or a distill.DistillSettings

    def __post_init__(self) -> None:
        if self.failure_score > self.perfect_score:
            raise InputError(f"failure_score ({self.failure_score}) must not exceed perfect_score "
                             f"({self.perfect_score})")
        if self.track_best_outputs and not self.track_stats:
            raise InputError("track_stats must be True if track_best_outputs is True (as in dspy.GEPA): the best "
                             "outputs are returned in detailed_results.best_outputs_valset")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise InputError(f"seed must be an integer or None, got {self.seed!r}")
        from dspy_adaptive.distill import DistillSettings
        if not isinstance(self.distill_router, (bool, DistillSettings)):
            raise InputError("distill_router must be True/False or a dspy_adaptive.distill.DistillSettings, got "
                             f"{type(self.distill_router).__name__}")


@dataclass(frozen=True)
class AdaptiveGEPAConfig:
    """Every setting of an AdaptiveGEPA, by owner. `search.seed` is the given seed (0 when None: compile draws
    one per run)."""

    budget: BudgetSettings
    search: SearchSettings
    merge: MergeSettings
    reflection: ReflectionSettings
    execution: ExecutionSettings
    program: ProgramSettings
    sandbox: SandboxSettings
    tracking: TrackingSettings
    run: RunSettings
    batch_sampler: BatchSampler = field(default=uniform_sampler)
    notes: tuple[str, ...] = ()

    def identity(self, search: SearchSettings, reflection: ReflectionSettings) -> dict[str, Any]:
        """What of these settings makes a search's results (its run identity, beside `assembly.spec_identity`):
        `search` with the seed it runs with (left out when drawn per compile) and `reflection` as resolved."""
        return {"optimizer": "AdaptiveGEPA",
                "search": {k: v for k, v in search.to_dict().items()      # (the default frontier as before it existed)
                           if (k != "seed" or self.run.seed is not None) and (k, v) != ("frontier_type", "instance")},
                "merge": self.merge.to_dict(), "reflection_lm": describe_lm(reflection.lm),
                "proposals": reflection.proposals_identity()}


def check_metric(metric: Callable) -> None:
    if not callable(metric):
        raise InputError(f"metric must be callable, got {type(metric).__name__}")
    try:
        signature = inspect.signature(metric)
    except ValueError:
        return  # builtins without a signature: accept
    try:
        signature.bind(None, None, None, None, None)
    except TypeError as e:
        raise MetricSignatureError(
            "metric must accept five arguments (gold, pred, trace, pred_name, pred_trace), like dspy.GEPA's "
            f"feedback metric; {_arity_problem(signature, e)}. Define it as "
            "`def metric(gold, pred, trace=None, pred_name=None, pred_trace=None)`.") from e


def _arity_problem(signature: inspect.Signature, error: TypeError) -> str:
    """What keeps `signature` from taking five positional arguments, in words: too few, or one more it requires."""
    params = signature.parameters.values()
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 5 and not any(p.kind is p.VAR_POSITIONAL for p in params):
        n = len(positional)
        return (f"yours takes too few: only {n} positional argument{'s' if n != 1 else ''}"
                + (f" ({', '.join(positional)})" if positional else ""))
    return f"yours requires more ({error})"


def config_from_args(a: Mapping[str, Any]) -> AdaptiveGEPAConfig:
    """The grouped settings of AdaptiveGEPA(**a), every argument validated (see AdaptiveGEPA's docstring)."""
    check_metric(a["metric"])
    selector = a["component_selector"]
    if not callable(selector):          # a callable maps onto the action choice; of the strings, only the default
        check_replaced("component_selector", selector, "round_robin")
    mapped = map_gepa_kwargs(a["gepa_kwargs"])
    if a["batch_sampler"] is not None and not callable(a["batch_sampler"]):
        raise InputError("batch_sampler must be a callable (examples, size, rng) -> list of indices")
    if a["wandb_init_kwargs"] is not None and not isinstance(a["wandb_init_kwargs"], Mapping):
        raise InputError(f"wandb_init_kwargs must be a dict, got {type(a['wandb_init_kwargs']).__name__}")
    reflection = ReflectionSettings(
        lm=a["reflection_lm"], instruction_proposer=a["instruction_proposer"], code_proposer=a["code_proposer"],
        component_selector=selector if callable(selector) else None,
        max_repair_attempts=a["max_repair_attempts"], proposal_format=a["proposal_format"],
        format_failure_feedback=a["add_format_failure_as_feedback"],
        context_tokens=a["reflection_context_tokens"], unusable_programs=a["unusable_programs"])
    budget = BudgetSettings(a["auto"], a["max_full_evals"], a["max_metric_calls"],
                            None if a["max_cost_usd"] is None else a["max_cost_usd"], a["max_idle_iterations"],
                            a["max_candidates"])
    search = SearchSettings(
        minibatch_size=a["reflection_minibatch_size"], skip_perfect_score=a["skip_perfect_score"],
        perfect_score=a["perfect_score"], seed=0 if a["seed"] is None else a["seed"],
        max_concurrent_proposals=a["max_concurrent_proposals"], fold_order=a["fold_order"],
        candidate_selection=a["candidate_selection_strategy"], frontier_type=mapped.frontier_type)
    merge = MergeSettings(a["use_merge"], a["max_merge_invocations"], a["merge_cadence"], a["merge_cap_counts"],
                          a["merge_parent_copies"], a["alignment"])
    program = ProgramSettings(a["max_specialists"], a["fast_lm"], a["deep_lm"], a["tools"])
    run = RunSettings(a["failure_score"], a["perfect_score"], a["reuse_scores"], a["log_dir"], a["track_stats"],
                      a["track_best_outputs"],
                      a["progress"] if mapped.display_progress_bar is None else mapped.display_progress_bar, a["seed"],
                      a["distill_router"])
    wandb_kwargs = dict(a["wandb_init_kwargs"]) if a["wandb_init_kwargs"] else None
    tracking = TrackingSettings(
        use_mlflow=bool(a["use_mlflow"] or mapped.use_mlflow), mlflow_tracking_uri=mapped.mlflow_tracking_uri,
        mlflow_experiment_name=mapped.mlflow_experiment_name, mlflow_attach_existing=mapped.mlflow_attach_existing,
        use_wandb=a["use_wandb"], wandb_api_key=a["wandb_api_key"], wandb_init_kwargs=wandb_kwargs,
        wandb_attach_existing=mapped.wandb_attach_existing, key_prefix=mapped.tracking_key_prefix)
    if tracking.use_mlflow or tracking.use_wandb:
        tracking.check_installed()   # a missing package is an error now, not after the search
    execution = ExecutionSettings(a["num_threads"], a["executor"], a["address"], a["route_memo"])
    return AdaptiveGEPAConfig(budget, search, merge, reflection, execution, program, a["sandbox"] or SandboxSettings(),
                              tracking, run, a["batch_sampler"] or uniform_sampler, tuple(mapped.notes))
