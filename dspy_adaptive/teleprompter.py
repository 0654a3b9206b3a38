"""AdaptiveGEPA: dspy.GEPA's interface, searching over routed libraries instead of prompts.

    optimizer = AdaptiveGEPA(metric, reflection_lm=dspy.LM(...), max_metric_calls=2000, log_dir="runs/x")
    routed = optimizer.compile(program, trainset=feedback_set, valset=pareto_set)

Parameters shared with dspy.GEPA keep its names and meaning. Everything is validated before the
first LM call; errors say what to fix.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import dspy
from dspy.teleprompt.teleprompt import Teleprompter

from dspy_adaptive.data import InputError, Row, input_keys, make_rows
from dspy_adaptive.library import Library
from dspy_adaptive.merge.proposer import MergeProposer
from dspy_adaptive.reflection.propose import Reflector
from dspy_adaptive.results import AdaptiveGEPAResult, write_run_record
from dspy_adaptive.routed_program import RoutedProgram, normalise_tools
from dspy_adaptive.sandbox import SandboxPool
from dspy_adaptive.search.budget import Budget
from dspy_adaptive.search.checkpoint import CheckpointStore
from dspy_adaptive.search.engine import SearchEngine, SearchSettings
from dspy_adaptive.search.evaluate import Evaluator
from dspy_adaptive.search.sampling import BatchSampler, uniform_sampler
from dspy_adaptive.search.select import SELECTORS, make_selector
from dspy_adaptive.usage import UsageMeter

AUTO_RUN_SETTINGS = {"light": {"n": 6}, "medium": {"n": 12}, "heavy": {"n": 18}}
ALIGNMENTS = ("mutual_best", "hungarian")


@dataclass(frozen=True)
class SandboxSettings:
    """How specialist programs run (see the README's safety model).

    Args:
        timeout: seconds one specialist call may compute in its worker (its LM calls excluded).
        call_timeout: seconds one specialist call may take in all, its LM and tool calls included.
        memory_mb: address-space limit of a worker process.
        max_predictor_calls: LM calls one specialist call may make (tool calls: the same number).
        isolation: "warn" (default) runs with the OS isolation this host offers and warns about the
            rest; "strict" refuses to start a search unless every layer (per-worker uid on root hosts,
            Landlock, seccomp, an empty network namespace) holds here.
    """

    timeout: float = 60.0
    call_timeout: float = 600.0
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


def _check_metric(metric: Callable) -> None:
    if not callable(metric):
        raise InputError(f"metric must be callable, got {type(metric).__name__}")
    try:
        inspect.signature(metric).bind(None, None, None, None, None)
    except TypeError as e:
        raise InputError(
            "metric must accept five arguments (gold, pred, trace, pred_name, pred_trace), like dspy.GEPA's "
            f"feedback metric; yours does not ({e}). Define it as "
            "`def metric(gold, pred, trace=None, pred_name=None, pred_trace=None)`.") from e
    except ValueError:
        pass  # builtins without a signature: accept


class AdaptiveGEPA(Teleprompter):
    """Evolves an LM router, specialist descriptions and sandboxed specialist programs (Adaptive-GEPA).

    `compile(program, trainset=..., valset=...)` returns a `RoutedProgram`: the router picks one of up to
    `max_specialists` specialist programs, or the user's `program` as the frozen fallback. Parameters
    shared with `dspy.GEPA` keep its names and meaning. A scored call is one program run on one example
    plus its metric; the budget counts every one (minibatches, validations, merge checks).

    Args:
        metric: dspy.GEPA's feedback metric, `metric(gold, pred, trace, pred_name, pred_trace)` returning a
            float or `dspy.Prediction(score=..., feedback=...)`. A metric that raises or returns a
            non-number is recorded and scored `failure_score`.
        auto: budget preset, "light" | "medium" | "heavy" (set exactly one of auto, max_full_evals,
            max_metric_calls).
        max_full_evals: budget as a number of full passes over trainset + valset.
        max_metric_calls: budget in scored calls. A new iteration starts only while the spent count is
            below it, so the final count may exceed it by at most one iteration (k with concurrency).
        reflection_minibatch_size: feedback (trainset) rows per reflective proposal.
        candidate_selection_strategy: "pareto" (GEPA's per-row frontier, frequency weighted) or
            "current_best" (the highest validation mean).
        reflection_lm: the LM that reads traces and proposes edits (required; use a strong model).
        skip_perfect_score: skip reflection when the parent scores `perfect_score` on the whole minibatch.
        use_merge: propose merges of two branches that share an ancestor (footprint-aligned).
        max_merge_invocations: most merges proposed in a run.
        merge_cadence: accepted reflective proposals between two merges.
        alignment: how a merge aligns the weaker parent's specialists: "mutual_best" (the paper) or
            "hungarian" (maximum-weight assignment over footprint overlap).
        num_threads: threads that run evaluation rows in parallel (None: 1).
        failure_score: the score of a failed rollout (the program raised) or a misbehaving metric.
        perfect_score: the score that counts as perfect for `skip_perfect_score`.
        log_dir: directory for checkpoints (rerun the same call to resume) and the run record (run.json,
            report.md, learning_curve.png). None: no files.
        track_stats: attach the run's `AdaptiveGEPAResult` to the returned program as `detailed_results`.
        seed: seed of the search's random choices (selection, minibatches, merges).
        max_specialists: K, the number of specialist slots.
        fast_lm: the LM of the "fast" profile; the router always uses it (None: the configured LM).
        deep_lm: the LM of the "deep" profile; the fallback always uses it (None: the configured LM).
        tools: functions specialists may call by name (a mapping name -> function, or a list of functions
            named by their `__name__`), e.g. a retrieval `search`.
        batch_sampler: `sampler(examples, size, rng) -> indices` drawing each reflection minibatch from the
            trainset, e.g. to balance by labels the models never see (default: uniform without replacement).
        sandbox: limits for specialist programs (`SandboxSettings`).
        max_concurrent_proposals: k, reflective proposals in flight at once, sharing the evaluation threads;
            1 is exactly the sequential loop.
        route_memo: during the search, memoise router decisions per (router, descriptions, request), as
            DSPy's LM cache would; the returned program does not memoise.
        max_idle_iterations: stop after this many iterations in a row that spend no scored call.
        progress: show a progress bar.
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
        use_merge: bool = True,
        max_merge_invocations: int = 5,
        merge_cadence: int = 2,
        alignment: str = "mutual_best",
        num_threads: int | None = None,
        failure_score: float = 0.0,
        perfect_score: float = 1.0,
        log_dir: str | None = None,
        track_stats: bool = False,
        seed: int = 0,
        max_specialists: int = 5,
        fast_lm: Any = None,
        deep_lm: Any = None,
        tools: Mapping[str, Callable] | Sequence[Callable] | None = None,
        batch_sampler: BatchSampler | None = None,
        sandbox: SandboxSettings | None = None,
        max_concurrent_proposals: int = 1,
        route_memo: bool = True,
        max_idle_iterations: int = 20,
        progress: bool = True,
    ):
        super().__init__()
        _check_metric(metric)
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
            raise InputError("reflection_lm is required: pass a strong model, e.g. "
                             "reflection_lm=dspy.LM('openai/gpt-5', temperature=1.0)")
        if candidate_selection_strategy not in SELECTORS:
            raise InputError(f"candidate_selection_strategy must be one of {sorted(SELECTORS)}, "
                             f"got {candidate_selection_strategy!r}")
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
        if merge_cadence < 1 or max_merge_invocations < 0:
            raise InputError("merge_cadence must be >= 1 and max_merge_invocations >= 0")
        if failure_score > perfect_score:
            raise InputError(f"failure_score ({failure_score}) must not exceed perfect_score ({perfect_score})")
        self.metric = metric
        self.auto, self.max_full_evals, self.max_metric_calls = auto, max_full_evals, max_metric_calls
        self.reflection_minibatch_size = reflection_minibatch_size
        self.candidate_selection_strategy = candidate_selection_strategy
        self.reflection_lm = reflection_lm
        self.skip_perfect_score, self.perfect_score = skip_perfect_score, perfect_score
        self.failure_score = failure_score
        self.use_merge, self.max_merge_invocations, self.merge_cadence = use_merge, max_merge_invocations, merge_cadence
        self.alignment = alignment
        self.num_threads = num_threads
        self.log_dir, self.track_stats, self.seed = log_dir, track_stats, seed
        self.max_specialists = max_specialists
        self.fast_lm, self.deep_lm = fast_lm, deep_lm
        self.tools = tools
        self.batch_sampler = batch_sampler or uniform_sampler
        self.sandbox_settings = sandbox or SandboxSettings()
        self.max_concurrent_proposals = max_concurrent_proposals
        self.route_memo = route_memo
        if not isinstance(max_idle_iterations, int) or max_idle_iterations < 1:
            raise InputError(f"max_idle_iterations must be an integer >= 1, got {max_idle_iterations!r}")
        self.max_idle_iterations = max_idle_iterations
        self.progress = progress

    # -- budget --------------------------------------------------------------------------------------
    def _budget_calls(self, n_train: int, n_val: int) -> int:
        if self.max_metric_calls is not None:
            return self.max_metric_calls
        if self.max_full_evals is not None:
            return self.max_full_evals * (n_train + n_val)
        n = AUTO_RUN_SETTINGS[self.auto]["n"]
        num_preds = 2 * self.max_specialists + 1  # router + (description, program) per slot
        trials = int(max(2 * (num_preds * 2) * math.log2(n), 1.5 * n))
        return n_val + trials * (2 * self.reflection_minibatch_size) + (trials // 5 + 1) * n_val

    # -- compile -------------------------------------------------------------------------------------------
    def compile(self, student: dspy.Module, *, trainset: Sequence[dspy.Example],
                valset: Sequence[dspy.Example] | None = None, **kwargs: Any) -> RoutedProgram:
        """Search for the best library and return it as a RoutedProgram.

        Args:
            student: the user's program; it becomes the frozen fallback.
            trainset: the feedback set reflection reads (examples need `.with_inputs(...)`).
            valset: the selection (Pareto) set every archived candidate is scored on (default: trainset).
            **kwargs: `teacher` is not supported (an error if given).

        Returns:
            The best archived library as a `RoutedProgram` (with `detailed_results` when `track_stats`).
        """
        if kwargs.get("teacher") is not None:
            raise InputError("AdaptiveGEPA does not use a teacher program")
        if not isinstance(student, dspy.Module):
            raise InputError(f"student must be a dspy.Module (it becomes the frozen fallback), "
                             f"got {type(student).__name__}")
        train = make_rows(trainset, "trainset")
        val = make_rows(valset, "valset") if valset is not None else train
        if input_keys(train) != input_keys(val) and set(input_keys(train)) != set(input_keys(val)):
            raise InputError(f"trainset inputs {input_keys(train)} differ from valset inputs {input_keys(val)}")
        max_calls = self._budget_calls(len(train), len(val) if valset is not None else 0)
        if max_calls <= len(val):
            raise InputError(f"the budget ({max_calls} scored calls) does not exceed one validation pass "
                             f"({len(val)} rows): raise it so the search can run at least one iteration")

        settings = SearchSettings(
            minibatch_size=self.reflection_minibatch_size, skip_perfect_score=self.skip_perfect_score,
            perfect_score=self.perfect_score, seed=self.seed, use_merge=self.use_merge,
            max_merge_invocations=self.max_merge_invocations, merge_cadence=self.merge_cadence,
            max_concurrent_proposals=self.max_concurrent_proposals, max_idle_iterations=self.max_idle_iterations)
        s = self.sandbox_settings
        base = RoutedProgram(student, Library.empty(self.max_specialists), fast_lm=self.fast_lm,
                             deep_lm=self.deep_lm, tools=self.tools)
        pool = SandboxPool(max_workers=max(2, self.num_threads or 1), timeout=s.timeout, call_timeout=s.call_timeout,
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
        budget = Budget(max_calls)
        meter = UsageMeter()
        evaluator = Evaluator(base, self.metric, budget, num_threads=self.num_threads or 1,
                              failure_score=self.failure_score)
        reflector = Reflector(self.reflection_lm, input_names=input_keys(train), output_names=(),
                              tools=tuple(base.tools))
        engine = SearchEngine(settings=settings, seed_library=Library.empty(self.max_specialists), train=train,
                              val=val, evaluator=evaluator, reflector=reflector,
                              selector=make_selector(self.candidate_selection_strategy),
                              sampler=self.batch_sampler, budget=budget, meter=meter, store=store,
                              fingerprint=fingerprint, merger=self._make_merger(), progress=self.progress)
        if store is not None and store.has_state():
            self._resume(engine, store, evaluator, meter, fingerprint)
        try:
            with meter.active():
                engine.run()
        finally:
            evaluator.close()
            if store is not None:
                store.close()
        best = engine.archive[engine.archive.best_index()]
        result = AdaptiveGEPAResult.from_state(engine.state_dict(), row_results=evaluator.cache.values(),
                                               schedule=engine.schedule.to_list(), log_dir=self.log_dir,
                                               sandbox=sandbox_record(pool))
        routed = base.with_library(best.library)
        routed._sandbox, routed._owns_sandbox = pool, True
        routed._route_memo = None
        if self.track_stats:
            routed.detailed_results = result
        if self.log_dir:
            write_run_record(result, self.log_dir)
        return routed

    def _make_merger(self) -> MergeProposer | None:
        return MergeProposer(alignment=self.alignment) if self.use_merge else None

    def _resume(self, engine: SearchEngine, store: CheckpointStore, evaluator: Evaluator, meter: UsageMeter,
                fingerprint: str) -> None:
        state = store.load_state()
        if state.get("fingerprint") != fingerprint:
            raise InputError(
                f"log_dir {self.log_dir!r} holds a run with a different configuration, program or data "
                "(its fingerprint differs). Refusing to resume it silently: use a new log_dir, or delete "
                "the old one to start over.")
        engine.load_state_dict(state)
        cache, tags, dropped = store.load_evals(engine.committed)
        evaluator.cache.update(cache)
        engine.lost_calls += dropped   # really spent, but by an iteration the interruption discarded
        store.rewrite_evals(cache, tags)
        meter.restore(state.get("usage", {}))

    def _fingerprint(self, student: dspy.Module, train: Sequence[Row], val: Sequence[Row],
                     settings: SearchSettings) -> str:
        try:
            program_state = json.dumps(student.dump_state(), sort_keys=True, default=str)
        except Exception:
            program_state = repr(student)
        # what the search does with these rows (the budget's size and the idle limit may change on resume)
        config = {k: v for k, v in settings.to_dict().items() if k != "max_idle_iterations"}
        config.update(failure_score=self.failure_score, alignment=self.alignment)
        payload = {
            "program": type(student).__qualname__, "program_state": program_state, "config": config,
            "max_specialists": self.max_specialists, "candidate_selection": self.candidate_selection_strategy,
            "train": [r.id for r in train], "val": [r.id for r in val],
            "tools": sorted(normalise_tools(self.tools)),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()

    def get_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("metric", "reflection_lm", "fast_lm",
                                                                     "deep_lm", "tools", "batch_sampler")}

