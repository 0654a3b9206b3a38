"""AdaptiveGEPA: dspy.GEPA's interface, searching over routed libraries instead of prompts.

    optimizer = AdaptiveGEPA(metric, reflection_lm=dspy.LM(...), max_metric_calls=2000, log_dir="runs/x")
    routed = optimizer.compile(program, trainset=feedback_set, valset=pareto_set)

Parameters shared with dspy.GEPA keep its names and meaning. Everything is validated before the
first LM call; errors say what to fix.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import random
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import dspy
from dspy.teleprompt.teleprompt import Teleprompter
from tqdm.auto import tqdm

from dspy_adaptive.compat import (
    AUTO_RUN_SETTINGS,
    EmptyTrainsetError,
    MetricSignatureError,
    auto_budget,
    check_replaced,
    map_gepa_kwargs,
    program_components,
)
from dspy_adaptive.data import InputError, Row, input_keys, make_rows
from dspy_adaptive.detailed import DetailedResults
from dspy_adaptive.library import Library
from dspy_adaptive.merge.proposer import MERGE_CAP_COUNTS, PARENT_COPY_POLICIES, MergeProposer
from dspy_adaptive.reflection.external import ProposerReflector
from dspy_adaptive.reflection.propose import Reflector
from dspy_adaptive.reflection.structured import PROPOSAL_FORMATS
from dspy_adaptive.results import AdaptiveGEPAResult, write_run_record
from dspy_adaptive.routed_program import RoutedProgram, normalise_tools
from dspy_adaptive.sandbox import SandboxPool
from dspy_adaptive.search.budget import Budget
from dspy_adaptive.search.checkpoint import CheckpointStore
from dspy_adaptive.search.engine import SearchEngine, SearchSettings
from dspy_adaptive.search.evaluate import Evaluator
from dspy_adaptive.search.sampling import BatchSampler, uniform_sampler
from dspy_adaptive.search.select import SELECTORS, make_selector
from dspy_adaptive.tracking import SearchTracker, TrackingSettings
from dspy_adaptive.usage import UsageMeter, current_meter

ALIGNMENTS = ("mutual_best", "hungarian")


class UnknownArgumentError(InputError, TypeError):
    """An argument the method does not take (a TypeError too, as Python raises for one)."""


@dataclass(frozen=True)
class SandboxSettings:
    """How specialist programs run (see the README's safety model).

    Args:
        timeout: seconds one specialist call may compute in its worker; also its CPU limit.
        call_timeout: seconds one specialist call may take in all, its LM and tool calls included (default:
            `timeout`: a call never takes longer than its timeout). A hard deadline: the call ends then even
            if one of its LM or tool calls has not (raise it for slow LMs, e.g. thinking models).
        memory_mb: address-space limit of a worker process.
        max_predictor_calls: LM calls one specialist call may make (tool calls: the same number).
        isolation: "warn" (default) runs with the OS isolation this host offers and warns about the
            rest; "strict" refuses to start a search unless every layer (per-worker uid on root hosts,
            Landlock, seccomp, an empty network namespace) holds here.
    """

    timeout: float = 60.0
    call_timeout: float | None = None
    memory_mb: int = 1024
    max_predictor_calls: int = 100
    isolation: str = "warn"

    def __post_init__(self) -> None:
        if self.isolation not in ("warn", "strict"):
            raise ValueError(f"SandboxSettings.isolation must be 'warn' or 'strict', got {self.isolation!r}")


def sandbox_record(pool: SandboxPool) -> dict[str, Any]:
    """The run record's `sandbox` entry: the pool's measured isolation (which layers held, and why any did
    not); if it cannot be measured, why not."""
    try:
        with warnings.catch_warnings():       # the pool has already warned once about missing layers
            warnings.simplefilter("ignore")
            return pool.isolation_report().to_dict()
    except Exception as e:  # noqa: BLE001 - the record says so instead of failing a finished search
        return {"error": f"{type(e).__name__}: {str(e)[:500]}"}


def build_row_scorer(*, student: dspy.Module, k: int, fast_lm: Any, deep_lm: Any, tools: Any,
                     input_names: Sequence[str], sandbox: "SandboxSettings", metric: Callable, failure_score: float,
                     keep_outputs: bool, format_failure_feedback: bool,
                     route_memo: bool = True) -> tuple[RoutedProgram, Callable]:
    """Inside a Ray actor: the run's base RoutedProgram with a sandbox pool of its own, and its row scorer."""
    base = RoutedProgram(student, Library.empty(k), fast_lm=fast_lm, deep_lm=deep_lm, tools=tools,
                         input_names=input_names)
    s = sandbox
    pool = SandboxPool(max_workers=2, timeout=s.timeout, call_timeout=s.call_timeout, memory_mb=s.memory_mb,
                       max_predictor_calls=s.max_predictor_calls, tool_names=tuple(base.tools), isolation=s.isolation)
    base._sandbox, base._owns_sandbox = pool, True
    if route_memo:
        base.share_route_memo()          # filled from, and returned to, the driver's memo each batch
    evaluator = Evaluator(base, metric, Budget(1), failure_score=failure_score, keep_outputs=keep_outputs,
                          format_failure_feedback=format_failure_feedback)
    return base, evaluator.score_row


class ResumeMismatchError(InputError):
    """log_dir holds a run of another configuration, program or data: it is not resumed silently."""


def _check_metric(metric: Callable) -> None:
    if not callable(metric):
        raise InputError(f"metric must be callable, got {type(metric).__name__}")
    try:
        inspect.signature(metric).bind(None, None, None, None, None)
    except TypeError as e:
        raise MetricSignatureError(
            "metric must accept five arguments (gold, pred, trace, pred_name, pred_trace), like dspy.GEPA's "
            f"feedback metric; yours does not ({e}). Define it as "
            "`def metric(gold, pred, trace=None, pred_name=None, pred_trace=None)`.") from e
    except ValueError:
        pass  # builtins without a signature: accept


class AdaptiveGEPA(Teleprompter):
    """Evolves an LM router, specialist descriptions and sandboxed specialist programs (Adaptive-GEPA).

    `compile(program, trainset=..., valset=...)` returns a `RoutedProgram`: the router picks one of up to
    `max_specialists` specialist programs, or the user's `program` as the frozen fallback. A scored call is one
    program run on one example plus its metric; the budget counts every one (minibatches, validations, merge
    checks).

    The constructor is dspy.GEPA's (3.4.1): every one of its parameters is accepted with the same name, default
    and meaning; the three that name a mechanism Adaptive-GEPA replaces (`instruction_proposer`,
    `code_proposer`, `component_selector`) raise one clear error when set (see `dspy_adaptive.compat`).
    Adaptive-GEPA's own parameters follow them.

    Args:
        metric: dspy.GEPA's feedback metric, `metric(gold, pred, trace, pred_name, pred_trace)` returning a
            number (float, int, bool or numpy scalar) or `dspy.Prediction(score=..., feedback=...)` (optionally
            with `objective_scores={name: number}`). A metric that raises or returns a non-number is recorded
            and scored `failure_score`.
        auto: budget preset, "light" | "medium" | "heavy": the budget dspy.GEPA computes for the same program
            and data (set exactly one of auto, max_full_evals, max_metric_calls).
        max_full_evals: budget as a number of full passes over trainset + valset.
        max_metric_calls: budget in scored calls. A new iteration starts only while the spent count is
            below it, so the final count may exceed it by at most one iteration (k with concurrency).
        reflection_minibatch_size: feedback (trainset) rows per reflective proposal.
        candidate_selection_strategy: "pareto" (GEPA's per-row frontier, frequency weighted), "current_best"
            (the highest validation mean), "epsilon_greedy" or "top_k_pareto" (gepa's, as dspy.GEPA passes them).
        reflection_lm: the LM that reads traces and proposes edits (required; use a strong model).
        skip_perfect_score: skip reflection when the parent scores `perfect_score` on the whole minibatch.
        add_format_failure_as_feedback: when the program fails because an LM answer could not be parsed into
            its output fields, show reflection the LM's raw answer with the failure (default: the failure only).
        instruction_proposer: dspy.GEPA's ProposalFn, mapped onto Adaptive-GEPA's components: it writes the text of
            rewrite_router ("router") and rewrite_description ("slot<k>.description") actions (and of
            rewrite_program without a code_proposer), called in the reflection LM's context with gepa's
            reflective dataset; the reflection LM still selects actions and writes activations
            (`dspy_adaptive.reflection.external`). None: the reflection LM writes every edit.
        code_proposer: dspy.GEPA's CodeProposalFn, mapped onto rewrite_program: it writes a specialist's new
            source ("slot<k>.program"), which the sandbox policy checks like any other. None: the reflection LM.
        component_selector: "round_robin" (default): the reflection LM selects each action and its target. A
            callable (gepa's ReflectionComponentSelector protocol) selects instead, by naming a component of the
            parent library ("router", "slot<k>.description", "slot<k>.program"; an inactive slot's means
            activate it); the other strings ("all") are refused with a clear error.
        use_merge: propose merges of two branches that share an ancestor (footprint-aligned).
        max_merge_invocations: the merge cap: most merges accepted in a run (as dspy.GEPA counts it), or
            attempted with `merge_cap_counts="attempts"`; None: no limit.
        num_threads: threads that run evaluation rows in parallel (None: `dspy.settings.num_threads`).
        failure_score: the score of a failed rollout (the program raised) or a misbehaving metric.
        perfect_score: the score that counts as perfect for `skip_perfect_score`.
        log_dir: directory for checkpoints (rerun the same call to resume) and the run record (run.json,
            report.md, PNGs). None: no files.
        track_stats: attach the run's results to the returned program as `detailed_results` (every field of
            dspy.GEPA's DspyGEPAResult, plus Adaptive-GEPA's run record).
        use_wandb: log the configuration, one step per proposal and the run directory to Weights & Biases.
        wandb_api_key: the W&B API key (default: W&B's own login / WANDB_API_KEY).
        wandb_init_kwargs: extra arguments to `wandb.init`.
        track_best_outputs: keep, per validation row, the best candidates' outputs in
            `detailed_results.best_outputs_valset` (needs track_stats=True).
        warn_on_score_mismatch: accepted for dspy.GEPA compatibility; Adaptive-GEPA calls the metric once per
            rollout at program level, so predictor- and program-level scores cannot disagree.
        use_mlflow: log the configuration, one step per proposal (step = scored calls spent) and the run
            directory's record to MLflow; attaches to an active run (needs `pip install dspy-adaptive[mlflow]`).
        seed: seed of the search's random choices (selection, minibatches, merges); None: a random seed.
        gepa_kwargs: dspy.GEPA's passthrough to gepa.optimize: keys with a counterpart here are mapped
            (use_mlflow, mlflow_tracking_uri, mlflow_experiment_name, mlflow_attach_existing,
            wandb_attach_existing, tracking_key_prefix, display_progress_bar); any other raises a clear error.
        max_specialists: K, the number of specialist slots.
        merge_cadence: a merge is due after this many accepted reflective proposals since the last merge
            attempt and is tried at the next iteration (1, the default: after every accepted reflective
            proposal, as gepa and the paper's run schedule merges); an iteration without an eligible pair
            runs a reflective proposal instead and the merge stays due.
        merge_cap_counts: what `max_merge_invocations` counts: "accepted" (merges that passed their check
            and entered the archive; gepa 0.1.4 and the paper) or "attempts" (every merge checked).
        merge_parent_copies: a merged child identical to one of its parents: "measure" (the paper: checked,
            charged, and validated and archived if it passes, counting as any merge) or "skip" (dropped
            before its check: no scored call, not an attempt, recorded with failure "merge_copy").
        reuse_scores: reuse a result already measured for the same candidate content and row instead of
            executing and charging it again. Default False: the paper's accounting, where every scoring
            invocation (minibatch, validation, merge check) runs and is charged, so an identical candidate
            is re-measured (the LM's own response cache may still answer its LM calls).
        alignment: how a merge aligns the weaker parent's specialists: "mutual_best" (the paper) or
            "hungarian" (maximum-weight assignment over footprint overlap).
        fast_lm: the LM of the "fast" profile; the router always uses it (None: the configured LM).
            `fast_lm, deep_lm = dspy_adaptive.profiles_from(actor_lm)` builds both from one actor with the
            paper's settings (Appendix B: thinking off/on, temperature 0.3/0.6, 4,096/8,192 tokens).
        deep_lm: the LM of the "deep" profile; the fallback always uses it (None: the configured LM).
            A specialist runs on the profile its source declares (`PROFILE = "fast" | "deep"`), else on
            the one chosen when its slot was activated.
        tools: functions specialists may call by name (a mapping name -> function, or a list of functions
            named by their `__name__`), e.g. a retrieval `search`.
        batch_sampler: `sampler(examples, size, rng) -> indices` drawing each reflection minibatch from the
            trainset, e.g. to balance by labels the models never see (default: uniform without replacement).
        sandbox: limits for specialist programs (`SandboxSettings`).
        max_concurrent_proposals: k, reflective proposals in flight at once, sharing the evaluation threads;
            1 is exactly the sequential loop.
        fold_order: with k > 1, "start" (default): proposals fold into the archive in the order they started
            and every decision is taken at a point fixed by the seed, so a seeded run with an LM whose answers
            depend only on the prompt ends the same at any k (with reuse_scores=False); "completion": they fold
            as they complete and a stale parent stops a proposal at its next step (a little more throughput,
            but the run then depends on thread timing).
        route_memo: during the search, memoise router decisions per (router, descriptions, request), as
            DSPy's LM cache would; the returned program does not memoise.
        max_idle_iterations: stop after this many iterations in a row that spend no scored call.
        progress: show a progress bar (with the budget, best score and the USD spent).
        max_cost_usd: stop on cost as on the budget: no new iteration starts once the LM cost of every role
            (router, specialists, fallback, reflection, metric/judge; litellm's list prices) reaches it.
        max_repair_attempts: when a reflection answer is rejected before the gate (the sandbox policy, a compile
            error, an answer that does not parse, an answer cut off at the token limit, an impossible target),
            the reflection LM gets the exact reason and its own answer back and may answer again, this many
            times per stage. Repairs are reflection calls, never scored calls; the run record keeps each attempt.
        proposal_format: how new specialist programs are written: "code" (the reflection LM writes the source),
            "structured" (it fills a typed specification -- the program's shape among predict, chain of
            thought, retrieve-then-answer over a tool and draft-and-check, plus its instructions -- and the
            source is generated from it, so it always passes the sandbox policy; suits small local reflection
            models) or "auto" (code, switching a target to structured after 2 recent code proposals for it
            were rejected before the gate).
        executor: where rows run: "threads" (a thread pool in this process; the default unless `address` is
            given) or "ray" (long-lived Ray actors, `num_threads` of them, each holding the student, a warm
            sandbox pool and the LM clients; needs the ray extra). The budget, cache, archive and every decision
            stay in this process.
        address: a Ray cluster address (e.g. "ray://head:10001" or "auto"); giving one means executor="ray".
            With executor="ray" and no address, a running Ray is joined, else a local one is started.
    """

    def __init__(
        self,
        metric: Callable,
        *,
        auto: str | None = None,
        max_full_evals: int | None = None,
        max_metric_calls: int | None = None,
        reflection_minibatch_size: int = 3,
        candidate_selection_strategy: str = "pareto",
        reflection_lm: Any = None,
        skip_perfect_score: bool = True,
        add_format_failure_as_feedback: bool = False,
        instruction_proposer: Any = None,
        code_proposer: Any = None,
        component_selector: Any = "round_robin",
        use_merge: bool = True,
        max_merge_invocations: int | None = 5,
        num_threads: int | None = None,
        failure_score: float = 0.0,
        perfect_score: float = 1.0,
        log_dir: str | None = None,
        track_stats: bool = False,
        use_wandb: bool = False,
        wandb_api_key: str | None = None,
        wandb_init_kwargs: dict[str, Any] | None = None,
        track_best_outputs: bool = False,
        warn_on_score_mismatch: bool = True,
        use_mlflow: bool = False,
        seed: int | None = 0,
        gepa_kwargs: dict | None = None,
        # Adaptive-GEPA's own
        max_specialists: int = 5,
        merge_cadence: int = 1,
        merge_cap_counts: str = "accepted",
        merge_parent_copies: str = "measure",
        reuse_scores: bool = False,
        alignment: str = "mutual_best",
        fast_lm: Any = None,
        deep_lm: Any = None,
        tools: Mapping[str, Callable] | Sequence[Callable] | None = None,
        batch_sampler: BatchSampler | None = None,
        sandbox: SandboxSettings | None = None,
        max_concurrent_proposals: int = 1,
        fold_order: str = "start",
        route_memo: bool = True,
        max_idle_iterations: int = 20,
        progress: bool = True,
        max_cost_usd: float | None = None,
        max_repair_attempts: int = 1,
        proposal_format: str = "code",
        executor: str | None = None,
        address: str | None = None,
    ):
        super().__init__()
        _check_metric(metric)
        if not callable(component_selector):   # a callable maps onto the action choice; of the strings, only
            check_replaced("component_selector", component_selector, "round_robin")   # the default is accepted
        for name, value in (("instruction_proposer", instruction_proposer), ("code_proposer", code_proposer)):
            if value is not None and not callable(value):
                raise InputError(f"{name} must be callable (dspy.GEPA's proposer protocol), got {type(value).__name__}")
        mapped = map_gepa_kwargs(gepa_kwargs)
        budgets = [x is not None for x in (auto, max_full_evals, max_metric_calls)]
        if sum(budgets) != 1:
            raise InputError("Set exactly one of auto, max_full_evals, max_metric_calls "
                             f"(got auto={auto!r}, max_full_evals={max_full_evals!r}, "
                             f"max_metric_calls={max_metric_calls!r}).")
        if auto is not None and auto not in AUTO_RUN_SETTINGS:
            raise InputError(f"auto must be one of {sorted(AUTO_RUN_SETTINGS)}, got {auto!r}")
        for name, value in (("max_full_evals", max_full_evals), ("max_metric_calls", max_metric_calls)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        if reflection_lm is None:
            extra = (" (also with instruction_proposer: the proposer writes the rewrite actions' text, while the "
                     "reflection LM selects each action and its target and writes activations)"
                     if instruction_proposer is not None or code_proposer is not None else "")
            raise InputError("reflection_lm is required: pass a strong model, e.g. "
                             f"reflection_lm=dspy.LM('openai/gpt-5', temperature=1.0){extra}")
        if candidate_selection_strategy not in SELECTORS:
            raise InputError(f"candidate_selection_strategy must be one of {sorted(SELECTORS)}, "
                             f"got {candidate_selection_strategy!r} (a gepa CandidateSelector object reads gepa's "
                             "engine state, which Adaptive-GEPA does not have)")
        if alignment not in ALIGNMENTS:
            raise InputError(f"alignment must be one of {ALIGNMENTS}, got {alignment!r}")
        if not isinstance(max_specialists, int) or isinstance(max_specialists, bool) or max_specialists < 1:
            raise InputError(f"max_specialists (K_max) must be an integer >= 1, got {max_specialists!r}")
        if not isinstance(reflection_minibatch_size, int) or reflection_minibatch_size < 1:
            raise InputError(f"reflection_minibatch_size must be an integer >= 1, got {reflection_minibatch_size!r}")
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise InputError(f"num_threads must be a positive integer or None, got {num_threads!r}")
        if batch_sampler is not None and not callable(batch_sampler):
            raise InputError("batch_sampler must be a callable (examples, size, rng) -> list of indices")
        if not isinstance(max_concurrent_proposals, int) or max_concurrent_proposals < 1:
            raise InputError(f"max_concurrent_proposals must be an integer >= 1, got {max_concurrent_proposals!r}")
        if not isinstance(merge_cadence, int) or merge_cadence < 1:
            raise InputError(f"merge_cadence must be an integer >= 1, got {merge_cadence!r}")
        if max_merge_invocations is not None and (not isinstance(max_merge_invocations, int)
                                                  or max_merge_invocations < 0):
            raise InputError(f"max_merge_invocations must be an integer >= 0 or None (no limit), "
                             f"got {max_merge_invocations!r}")
        if merge_cap_counts not in MERGE_CAP_COUNTS:
            raise InputError(f"merge_cap_counts must be one of {MERGE_CAP_COUNTS}, got {merge_cap_counts!r}")
        if merge_parent_copies not in PARENT_COPY_POLICIES:
            raise InputError(f"merge_parent_copies must be one of {PARENT_COPY_POLICIES}, "
                             f"got {merge_parent_copies!r}")
        if failure_score > perfect_score:
            raise InputError(f"failure_score ({failure_score}) must not exceed perfect_score ({perfect_score})")
        if track_best_outputs and not track_stats:
            raise InputError("track_stats must be True if track_best_outputs is True (as in dspy.GEPA): the best "
                             "outputs are returned in detailed_results.best_outputs_valset")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise InputError(f"seed must be an integer or None, got {seed!r}")
        if max_cost_usd is not None and (isinstance(max_cost_usd, bool) or not isinstance(max_cost_usd, (int, float))
                                         or not max_cost_usd > 0):
            raise InputError(f"max_cost_usd must be a positive number of US dollars or None, got {max_cost_usd!r}")
        if wandb_init_kwargs is not None and not isinstance(wandb_init_kwargs, Mapping):
            raise InputError(f"wandb_init_kwargs must be a dict, got {type(wandb_init_kwargs).__name__}")
        self.metric = metric
        self.metric_fn = metric   # dspy.GEPA's attribute name
        self.auto, self.max_full_evals, self.max_metric_calls = auto, max_full_evals, max_metric_calls
        self.reflection_minibatch_size = reflection_minibatch_size
        self.candidate_selection_strategy = candidate_selection_strategy
        self.reflection_lm = reflection_lm
        self.skip_perfect_score, self.perfect_score = skip_perfect_score, perfect_score
        self.add_format_failure_as_feedback = add_format_failure_as_feedback
        self.component_selector = component_selector
        self.instruction_proposer, self.code_proposer = instruction_proposer, code_proposer
        self.failure_score = failure_score
        self.use_merge, self.max_merge_invocations, self.merge_cadence = use_merge, max_merge_invocations, merge_cadence
        self.merge_cap_counts, self.merge_parent_copies = merge_cap_counts, merge_parent_copies
        self.reuse_scores = reuse_scores
        self.alignment = alignment
        self.num_threads = num_threads
        self.log_dir, self.track_stats, self.seed = log_dir, track_stats, seed
        self.track_best_outputs = track_best_outputs
        self.warn_on_score_mismatch = warn_on_score_mismatch
        self.use_wandb, self.wandb_api_key = use_wandb, wandb_api_key
        self.wandb_init_kwargs = dict(wandb_init_kwargs) if wandb_init_kwargs else None
        self.use_mlflow = bool(use_mlflow or mapped.use_mlflow)
        self.gepa_kwargs = dict(gepa_kwargs or {})
        self.tracking = TrackingSettings(
            use_mlflow=self.use_mlflow, mlflow_tracking_uri=mapped.mlflow_tracking_uri,
            mlflow_experiment_name=mapped.mlflow_experiment_name, mlflow_attach_existing=mapped.mlflow_attach_existing,
            use_wandb=use_wandb, wandb_api_key=wandb_api_key, wandb_init_kwargs=self.wandb_init_kwargs,
            wandb_attach_existing=mapped.wandb_attach_existing, key_prefix=mapped.tracking_key_prefix)
        if self.tracking.use_mlflow or self.tracking.use_wandb:
            self.tracking.check_installed()   # a missing package is an error now, not after the search
        self.max_specialists = max_specialists
        self.fast_lm, self.deep_lm = fast_lm, deep_lm
        self.tools = tools
        self.batch_sampler = batch_sampler or uniform_sampler
        self.sandbox_settings = sandbox or SandboxSettings()
        self.max_concurrent_proposals = max_concurrent_proposals
        if fold_order not in ("start", "completion"):
            raise InputError(f"fold_order must be 'start' or 'completion', got {fold_order!r}")
        self.fold_order = fold_order
        self.route_memo = route_memo
        if not isinstance(max_idle_iterations, int) or max_idle_iterations < 1:
            raise InputError(f"max_idle_iterations must be an integer >= 1, got {max_idle_iterations!r}")
        self.max_idle_iterations = max_idle_iterations
        self.progress = progress if mapped.display_progress_bar is None else mapped.display_progress_bar
        self.max_cost_usd = float(max_cost_usd) if max_cost_usd is not None else None
        if isinstance(max_repair_attempts, bool) or not isinstance(max_repair_attempts, int) \
                or max_repair_attempts < 0:
            raise InputError(f"max_repair_attempts must be an integer >= 0, got {max_repair_attempts!r}")
        self.max_repair_attempts = max_repair_attempts
        if proposal_format not in PROPOSAL_FORMATS:
            raise InputError(f"proposal_format must be one of {', '.join(map(repr, PROPOSAL_FORMATS))}, got "
                             f"{proposal_format!r}")
        self.proposal_format = proposal_format
        if executor is None:
            executor = "ray" if address is not None else "threads"
        if executor not in ("threads", "ray"):
            raise InputError(f"executor must be 'threads' or 'ray', got {executor!r}")
        if address is not None and executor != "ray":
            raise InputError(f'address={address!r} runs rows on Ray, but executor="threads" was given: drop one')
        if executor == "ray":
            from dspy_adaptive.search.ray_executor import require_ray
            require_ray()                  # a clear error now, before any LM money is spent
        self.executor, self.address = executor, address

    # -- budget --------------------------------------------------------------------------------------
    def _budget_calls(self, student: dspy.Module, n_train: int, n_val: int) -> int:
        """Scored calls allowed: max_metric_calls; max_full_evals x (trainset + valset), as dspy.GEPA counts it
        (valset 0 when none is given); or dspy.GEPA's own `auto` budget for this program and data."""
        if self.max_metric_calls is not None:
            return self.max_metric_calls
        if self.max_full_evals is not None:
            return self.max_full_evals * (n_train + n_val)
        return auto_budget(self.auto, program_components(student), n_val or n_train)

    # -- compile -------------------------------------------------------------------------------------------
    def compile(self, student: dspy.Module, *, trainset: Sequence[dspy.Example], teacher: dspy.Module | None = None,
                valset: Sequence[dspy.Example] | None = None, **kwargs: Any) -> RoutedProgram:
        """Search for the best library and return it as a RoutedProgram.

        Args:
            student: the user's program; it becomes the frozen fallback.
            trainset: the feedback set reflection reads (examples need `.with_inputs(...)`).
            teacher: not supported (as in dspy.GEPA): must be None.
            valset: the selection (Pareto) set every archived candidate is scored on (default: trainset).
            **kwargs: none are taken: any keyword raises a clear error (an InputError that is also a TypeError)
                rather than being ignored.

        Returns:
            The best archived library as a `RoutedProgram` (with `detailed_results` when `track_stats`).
        """
        if kwargs:
            raise UnknownArgumentError(
                f"AdaptiveGEPA.compile() got unexpected keyword argument(s) {', '.join(map(repr, sorted(kwargs)))}: it "
                "takes student, trainset, teacher (must be None) and valset, as dspy.GEPA.compile does. Optimizer "
                "settings belong to AdaptiveGEPA(...).")
        if teacher is not None:
            raise InputError("AdaptiveGEPA does not use a teacher program (neither does dspy.GEPA): pass teacher=None")
        if not isinstance(student, dspy.Module):
            raise InputError(f"student must be a dspy.Module (it becomes the frozen fallback), "
                             f"got {type(student).__name__}")
        if trainset is None:   # an AssertionError too, as dspy.GEPA's `assert` raises
            raise EmptyTrainsetError("trainset is None: pass a non-empty list of dspy.Example objects")
        if hasattr(trainset, "__len__") and not isinstance(trainset, (str, bytes)) and len(trainset) == 0:
            raise EmptyTrainsetError("trainset is empty: pass at least one dspy.Example (the feedback set "
                                     "reflection reads)")
        train = make_rows(trainset, "trainset")
        val = make_rows(valset, "valset") if valset is not None else train
        if input_keys(train) != input_keys(val) and set(input_keys(train)) != set(input_keys(val)):
            raise InputError(f"trainset inputs {input_keys(train)} differ from valset inputs {input_keys(val)}")
        max_calls = self._budget_calls(student, len(train), len(val) if valset is not None else 0)
        if max_calls <= len(val):
            raise InputError(f"the budget ({max_calls} scored calls) does not exceed one validation pass "
                             f"({len(val)} rows): raise it so the search can run at least one iteration")
        num_threads = self.num_threads or dspy.settings.num_threads or 1
        seed = self.seed if self.seed is not None else random.SystemRandom().randrange(2 ** 31)

        settings = SearchSettings(
            minibatch_size=self.reflection_minibatch_size, skip_perfect_score=self.skip_perfect_score,
            perfect_score=self.perfect_score, seed=seed, use_merge=self.use_merge,
            max_merge_invocations=self.max_merge_invocations, merge_cadence=self.merge_cadence,
            merge_cap_counts=self.merge_cap_counts, merge_parent_copies=self.merge_parent_copies,
            max_concurrent_proposals=self.max_concurrent_proposals, max_idle_iterations=self.max_idle_iterations,
            fold_order=self.fold_order)
        s = self.sandbox_settings
        base = RoutedProgram(student, Library.empty(self.max_specialists), fast_lm=self.fast_lm,
                             deep_lm=self.deep_lm, tools=self.tools, input_names=input_keys(train))
        pool = SandboxPool(max_workers=max(2, num_threads), timeout=s.timeout, call_timeout=s.call_timeout,
                           memory_mb=s.memory_mb, max_predictor_calls=s.max_predictor_calls,
                           tool_names=tuple(base.tools), isolation=s.isolation)
        base._sandbox, base._owns_sandbox = pool, False
        if s.isolation == "strict":
            pool.isolation_report()     # refuses here, before any LM money is spent
        else:
            pool.prestart()
        if self.route_memo:
            base.share_route_memo()
        fingerprint = self._fingerprint(student, train, val, settings)
        store = CheckpointStore(self.log_dir) if self.log_dir else None
        if store is not None:
            store.prepare()
        meter = UsageMeter()
        budget = Budget(max_calls, max_cost_usd=self.max_cost_usd, cost=meter.total_cost)
        evaluator = Evaluator(base, self.metric, budget, num_threads=num_threads, failure_score=self.failure_score,
                              keep_outputs=self.track_best_outputs,
                              format_failure_feedback=self.add_format_failure_as_feedback,
                              reuse_scores=self.reuse_scores,
                              executor=self._ray_executor(student, train, num_threads, meter, base)
                              if self.executor == "ray" else None)
        selector = self.component_selector if callable(self.component_selector) else None
        if self.instruction_proposer is not None or self.code_proposer is not None or selector is not None:
            reflector = ProposerReflector(self.reflection_lm, instruction_proposer=self.instruction_proposer,
                                          code_proposer=self.code_proposer, component_selector=selector,
                                          input_names=input_keys(train), output_names=(), tools=dict(base.tools),
                                          **self._proposal_options())
        else:
            reflector = Reflector(self.reflection_lm, input_names=input_keys(train), output_names=(),
                                  tools=dict(base.tools), **self._proposal_options())
        tracker = SearchTracker(self.tracking)
        engine = SearchEngine(settings=settings, seed_library=Library.empty(self.max_specialists), train=train,
                              val=val, evaluator=evaluator, reflector=reflector,
                              selector=make_selector(self.candidate_selection_strategy),
                              sampler=self.batch_sampler, budget=budget, meter=meter, store=store,
                              fingerprint=fingerprint, merger=self._make_merger(), progress=self.progress,
                              observers=[tracker.on_proposal] if tracker else ())
        if store is not None and store.has_state():
            self._resume(engine, store, evaluator, meter, fingerprint)
        elif store is not None:
            restored = store.start_seed(fingerprint, engine.seed_library.content_hash)
            engine.restore_seed_rows(restored)
            if restored and self.progress:
                tqdm.write(f"Resuming the seed validation in {self.log_dir}: {len(restored)} of {len(val)} rows "
                           "were scored before the interruption.")
        if tracker:
            tracker.start(self._tracking_config(max_calls, num_threads, seed, len(train), len(val)))
        failed = True
        try:
            with meter.active():
                engine.run()
            failed = False
        finally:
            evaluator.close(wait=not failed)   # interrupted: rows not started are dropped, not run first
            if store is not None:
                store.close()
            if tracker and failed:
                tracker.finish(failed=True)
        best = engine.archive[engine.archive.best_index()]
        result = AdaptiveGEPAResult.from_state(engine.state_dict(), row_results=evaluator.faulty,
                                               schedule=engine.schedule.to_list(), log_dir=self.log_dir,
                                               sandbox=sandbox_record(pool))
        from dspy_adaptive.lm.pool import endpoint_usage
        endpoints = endpoint_usage(*{id(lm): lm for lm in (self.fast_lm, self.deep_lm, self.reflection_lm,
                                                            dspy.settings.lm) if lm is not None}.values())
        if endpoints:
            result = dataclasses.replace(result, endpoints=endpoints)
        routed = base.with_library(best.library)
        routed._sandbox, routed._owns_sandbox = pool, True
        routed._route_memo = None
        base._route_memo = None
        if self.track_stats:
            routed.detailed_results = DetailedResults.build(
                result, base, val, evaluator.cache, track_best_outputs=self.track_best_outputs)
        if self.log_dir:
            write_run_record(result, self.log_dir)
            routed.export(Path(self.log_dir) / "best_library")
        if tracker:
            self._log_artifacts(tracker, result, routed)
            tracker.finish()
        return routed

    def _tracking_config(self, max_calls: int, num_threads: int, seed: int, n_train: int, n_val: int) -> dict:
        config = {k: v for k, v in self.get_params().items() if k not in ("tracking", "gepa_kwargs", "wandb_api_key")}
        config.update(resolved_max_metric_calls=max_calls, resolved_num_threads=num_threads, resolved_seed=seed,
                      trainset_size=n_train, valset_size=n_val, optimizer="AdaptiveGEPA")
        if self.gepa_kwargs:
            config["gepa_kwargs"] = sorted(self.gepa_kwargs)
        return config

    def _log_artifacts(self, tracker: SearchTracker, result: AdaptiveGEPAResult, routed: RoutedProgram) -> None:
        """The run directory as artifacts: run.json, report.md, PNGs, the exported best library (written to a
        temporary directory first when there is no log_dir)."""
        if self.log_dir:
            tracker.log_artifacts(Path(self.log_dir))
            return
        with tempfile.TemporaryDirectory(prefix="adaptive-gepa-run-") as tmp:
            write_run_record(result, tmp)
            routed.export(Path(tmp) / "best_library")
            tracker.log_artifacts(Path(tmp))

    def _ray_executor(self, student: dspy.Module, train: Sequence[Row], num_threads: int, meter: UsageMeter,
                      base: RoutedProgram) -> Any:
        """Ray actors that each rebuild this run's base program (student, profiles, tools, sandbox limits) and
        score rows with the same settings as the thread executor."""
        from dspy_adaptive.search.ray_executor import RayExecutor
        spec = dict(student=student, k=self.max_specialists, fast_lm=self.fast_lm, deep_lm=self.deep_lm,
                    tools=self.tools, input_names=input_keys(train), sandbox=self.sandbox_settings, metric=self.metric,
                    failure_score=self.failure_score, keep_outputs=self.track_best_outputs,
                    format_failure_feedback=self.add_format_failure_as_feedback, route_memo=self.route_memo)

        def on_usage(snapshot: dict[str, Any]) -> None:     # into the proposal's ledger too, when one is open
            (current_meter() or meter).merge(snapshot)

        return RayExecutor(functools.partial(build_row_scorer, **spec), num_actors=num_threads,
                           address=self.address, failure_score=self.failure_score, on_usage=on_usage,
                           settings={"lm": dspy.settings.lm, "adapter": dspy.settings.adapter},
                           num_cpus=max(2, num_threads), route_memo=lambda: base._route_memo)

    def _proposal_options(self) -> dict[str, Any]:
        return {"max_repair_attempts": self.max_repair_attempts, "proposal_format": self.proposal_format}

    def _make_merger(self) -> MergeProposer | None:
        return MergeProposer(alignment=self.alignment, parent_copies=self.merge_parent_copies) \
            if self.use_merge else None

    def _resume(self, engine: SearchEngine, store: CheckpointStore, evaluator: Evaluator, meter: UsageMeter,
                fingerprint: str) -> None:
        state = store.load_state()
        if state.get("fingerprint") != fingerprint:
            raise ResumeMismatchError(
                f"log_dir {self.log_dir!r} holds a run with a different configuration, program or data "
                "(its fingerprint differs). Refusing to resume it silently: use a new log_dir, or delete "
                "the old one to start over.")
        engine.load_state_dict(state)
        if state.get("seed") is not None and state["seed"] != engine.s.seed:   # seed=None: the run's own seed
            engine.s = dataclasses.replace(engine.s, seed=state["seed"])
        entries, dropped = store.load_evals(engine.committed)
        for _, key, res in entries:            # the latest result per (candidate, row), and every faulty call
            evaluator.cache[(key, res.row_id)] = res
            evaluator.note_fault(res)
        engine.lost_calls += dropped   # really spent, but by an iteration the interruption discarded
        store.rewrite_evals(entries)
        meter.restore(state.get("usage", {}))
        if self.progress:
            tqdm.write(f"Resuming {self.log_dir}: iteration {engine.iteration}, {engine.budget.spent} of "
                       f"{engine.budget.max_calls} scored calls spent, {len(engine.archive)} candidates "
                       f"(best validation mean {engine.archive[engine.archive.best_index()].val_mean:.3f}).")

    def _fingerprint(self, student: dspy.Module, train: Sequence[Row], val: Sequence[Row],
                     settings: SearchSettings) -> str:
        try:
            program_state = json.dumps(student.dump_state(), sort_keys=True, default=str)
        except Exception:
            program_state = repr(student)
        # what the search does with these rows (the budget's size and the idle limit may change on resume)
        # (seed=None draws a seed per compile: a rerun resumes with the run's own seed, kept in its state)
        skip = ("max_idle_iterations", "seed") if self.seed is None else ("max_idle_iterations",)
        config = {k: v for k, v in settings.to_dict().items() if k not in skip}
        config.update(failure_score=self.failure_score, alignment=self.alignment, reuse_scores=self.reuse_scores)
        if self.add_format_failure_as_feedback:   # (only when set: older runs keep their fingerprint)
            config["format_failure_feedback"] = True
        payload = {
            "program": type(student).__qualname__, "program_state": program_state, "config": config,
            "max_specialists": self.max_specialists, "candidate_selection": self.candidate_selection_strategy,
            "train": [r.id for r in train], "val": [r.id for r in val],
            "tools": sorted(normalise_tools(self.tools)),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()

    def get_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()
                if k not in ("metric", "metric_fn", "reflection_lm", "fast_lm", "deep_lm", "tools", "batch_sampler")}

