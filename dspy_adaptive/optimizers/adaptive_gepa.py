"""AdaptiveGEPA: dspy.GEPA's interface, searching over routed libraries instead of prompts.

    optimizer = AdaptiveGEPA(metric, reflection_lm=dspy.LM(...), max_metric_calls=2000, log_dir="runs/x")
    routed = optimizer.compile(program, trainset=feedback_set, valset=pareto_set)

dspy.GEPA's parameters keep their names and meaning, mapped onto settings grouped by owner (`optimizers.config`);
`compile` reads build -> resume -> run -> result over the one run assembly and the one search loop.
"""

from __future__ import annotations

import dataclasses
import random
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import dspy
from dspy.teleprompt.teleprompt import Teleprompter
from tqdm.auto import tqdm

from dspy_adaptive.data import InputError, Row, input_keys
from dspy_adaptive.optimizers.assembly import AssembledRun, BudgetLimits, RunSpec, assemble, spec_identity
from dspy_adaptive.optimizers.config import config_from_args
from dspy_adaptive.optimizers.inputs import UnknownArgumentError, compile_rows
from dspy_adaptive.program.library import Library
from dspy_adaptive.program.routed import RoutedProgram
from dspy_adaptive.record.dspy_result import DetailedResults
from dspy_adaptive.record.run_record import AdaptiveGEPAResult, sandbox_record, write_run_record
from dspy_adaptive.record.tracking import SearchTracker, log_run_artifacts, optimizer_config
from dspy_adaptive.sandbox.settings import SandboxSettings
from dspy_adaptive.search.checkpoint import ResumeMismatchError
from dspy_adaptive.search.engine import SearchEngine
from dspy_adaptive.search.sampling import BatchSampler


class AdaptiveGEPA(Teleprompter):
    """Evolves an LM router, specialist descriptions and sandboxed specialist programs (Adaptive-GEPA).

    `compile(program, trainset=..., valset=...)` returns a `RoutedProgram`: the router picks one of up to
    `max_specialists` specialist programs, or the user's `program` as the frozen fallback. A scored call is one
    program run on one example plus its metric; the budget counts every one (minibatches, validations, merge
    checks).

    The constructor is dspy.GEPA's (3.4.1): every one of its parameters is accepted with the same name, default
    and meaning; the three that name a mechanism Adaptive-GEPA replaces (`instruction_proposer`,
    `code_proposer`, `component_selector`) raise one clear error when set (see `dspy_adaptive.optimizers.gepa_compat`).
    Adaptive-GEPA's own parameters follow them.

    Args:
        metric: dspy.GEPA's feedback metric, `metric(gold, pred, trace, pred_name, pred_trace)` returning a
            number (float, int, bool or numpy scalar) or `dspy.Prediction(score=..., feedback=...)` (optionally
            with `objective_scores={name: number}`). A metric that raises or returns a non-number is recorded
            and scored `failure_score`; one that does so on every row of the seed validation stops the run before
            any reflection (`lm.preflight.MetricFaultError`).
        auto: budget preset, "light" | "medium" | "heavy": the budget dspy.GEPA computes for the same program
            and data (set exactly one of auto, max_full_evals, max_metric_calls).
        max_full_evals: budget as a number of full passes over trainset + valset.
        max_metric_calls: budget in scored calls. A new iteration starts only while the spent count is
            below it, so the final count may exceed it by at most one iteration (k with concurrency).
        reflection_minibatch_size: feedback (trainset) rows per reflective proposal.
        candidate_selection_strategy: "pareto" (GEPA's per-row frontier, frequency weighted), "current_best"
            (the highest validation mean), "epsilon_greedy" or "top_k_pareto" (gepa's, as dspy.GEPA passes them).
        reflection_lm: the LM that reads traces and proposes edits (use a strong model): a `dspy.BaseLM` such as
            `dspy.LM("openai/gpt-4.1")` (a name or plain function is refused before any call, as in every LM role).
            Required unless a proposer or component_selector is given; then None means the configured LM (warned).
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
            wandb_attach_existing, tracking_key_prefix, display_progress_bar, frontier_type: gepa's "instance",
            "objective", "hybrid" or "cartesian" Pareto frontier for parent selection and merges); any other
            raises a clear error.
        max_specialists: K, the number of specialist slots (Adaptive-GEPA's own parameters follow; each is
            documented in full by the settings group that owns it, named in brackets).
        merge_cadence: accepted reflective proposals between merges (`merge.settings.MergeSettings`).
        merge_cap_counts: what max_merge_invocations counts: "accepted" or "attempts" (MergeSettings).
        merge_parent_copies: a merged child identical to a parent: "measure" or "skip" (MergeSettings).
        reuse_scores: reuse a result already measured for the same candidate and row instead of running and
            charging it again (default False: the paper's accounting, every scoring invocation is charged).
        alignment: how merges align specialists: "mutual_best" (the paper) or "hungarian" (MergeSettings).
        fast_lm: the LM of the "fast" profile, the router's (None: the configured LM; `ProgramSettings`).
        deep_lm: the LM of the "deep" profile, the fallback's (None: the configured LM; `ProgramSettings`).
        tools: functions specialists may call by name (a mapping, or functions named by `__name__`).
        batch_sampler: `sampler(examples, size, rng) -> indices` drawing each reflection minibatch from the
            trainset (default: uniform without replacement).
        sandbox: limits for specialist programs (`SandboxSettings`).
        max_concurrent_proposals: k proposals in flight (1: the sequential loop; `SearchSettings`).
        fold_order: "start" (a seeded run is reproducible at any k) or "completion" (`SearchSettings`).
        route_memo: memoise router decisions during the search (`search.execution.ExecutionSettings`).
        max_idle_iterations: stop after this many iterations in a row that spend no scored call.
        progress: show a progress bar (budget, best score, USD spent).
        max_cost_usd: stop once the LM cost of every role reaches this many US dollars.
        max_repair_attempts: times a reflection answer rejected before the gate is sent back with its reason
            (`reflection.settings.ReflectionSettings`).
        proposal_format: new programs as "code", "structured" or "auto" (default: structured for an in-process
            local reflection model, else code switching to structured after rejections; ReflectionSettings).
        reflection_context_tokens: the reflection LM's context window (None: read from the LM); what reflection
            reads is fitted into it (ReflectionSettings).
        unusable_programs: "reject" (default) or "gate": truncated or refused programs go to the gate, charged,
            as the paper ran (ReflectionSettings).
        max_candidates: stop once the archive holds this many candidates (the paper's 100; None: no cap).
        executor: where rows run: "threads" or "ray" (ExecutionSettings).
        address: a Ray cluster address; giving one means executor="ray" (ExecutionSettings).
        distill_router: after the search, serve with a classifier distilled from the router (True or DistillSettings).
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
        proposal_format: str = "auto",
        reflection_context_tokens: int | None = None,
        unusable_programs: str = "reject",
        max_candidates: int | None = None,
        executor: str | None = None,
        address: str | None = None,
        distill_router: Any = False,
    ):
        super().__init__()
        args = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self.config = config_from_args(args)          # every argument validated here, before any LM call
        vars(self).update(args)                       # dspy.GEPA's attribute names, as given
        self.metric_fn, self.sandbox_settings, self.tracking = metric, self.config.sandbox, self.config.tracking
        self.use_mlflow, self.progress = self.tracking.use_mlflow, self.config.run.progress   # as gepa_kwargs map
        self.executor = self.config.execution.executor
        for note in self.config.notes:
            warnings.warn(note, UserWarning, stacklevel=2)

    def compile(self, student: dspy.Module, *, trainset: Sequence[dspy.Example], teacher: dspy.Module | None = None,
                valset: Sequence[dspy.Example] | None = None, **kwargs: Any) -> RoutedProgram:
        """Search for the best library and return it as a RoutedProgram (with `detailed_results` when `track_stats`).

        Args:
            student: the user's program; it becomes the frozen fallback.
            trainset: the feedback set reflection reads (examples need `.with_inputs(...)`).
            teacher: not supported (as in dspy.GEPA): must be None.
            valset: the selection (Pareto) set every archived candidate is scored on (default: trainset).
            **kwargs: none are taken: any keyword raises a clear error rather than being ignored.
        """
        train, val = compile_rows("AdaptiveGEPA", student, trainset, teacher, valset, kwargs)
        tracker = SearchTracker(self.config.tracking)
        run, engine = self._build(student, train, val, valset is not None, tracker)         # build
        with run.holding_log_dir():                      # log_dir is this run's until its record is written
            if run.restore(engine.load_state_dict) and self.config.run.progress:               # resume
                tqdm.write(engine.resume_summary(self.log_dir, len(run.resume.pending)))
            if tracker:
                tracker.start(optimizer_config(self.get_params(), "AdaptiveGEPA",
                                               max_metric_calls=run.budget.max_calls, num_threads=run.threads,
                                               seed=engine.s.seed, trainset_size=len(train), valset_size=len(val)))
            try:
                with run, run.meter.active():                                                  # run
                    engine.run()
            except BaseException:
                if tracker:
                    tracker.finish(failed=True)
                raise
            return self._result(run, engine, train, val, tracker)                              # result

    def _build(self, student: dspy.Module, train: Sequence[Row], val: Sequence[Row], has_valset: bool,
               tracker: SearchTracker) -> tuple[AssembledRun, SearchEngine]:
        c = self.config
        max_calls = c.budget.calls(student, len(train), len(val) if has_valset else 0)
        if max_calls <= len(val):
            raise InputError(f"the budget ({max_calls} scored calls) does not exceed one validation pass "
                             f"({len(val)} rows): raise it so the search can run at least one iteration")
        seed = c.run.seed if c.run.seed is not None else random.SystemRandom().randrange(2 ** 31)
        search = dataclasses.replace(c.search, seed=seed)
        spec = RunSpec(student, self.metric, input_keys(train), c.program, c.sandbox,
                       c.execution, c.run.failure_score, c.run.track_best_outputs,
                       c.reflection.format_failure_feedback, c.run.reuse_scores)
        reflection = c.reflection.resolved()        # no reflection_lm with a proposer: the configured LM
        identity = {**spec_identity(spec, train, val), **c.identity(search, reflection)}
        b = c.budget
        run = assemble(spec, limits=BudgetLimits(max_calls, b.max_cost_usd, b.max_idle_iterations, b.max_candidates),
                       log_dir=c.run.log_dir, identity=identity, what="search", progress=c.run.progress,
                       lms={"reflection_lm": reflection.lm})        # (resolved: checked as the reflection role)
        run.prepare_pool(strict=c.sandbox.isolation == "strict")   # refuses here, before any LM money is spent
        reflector = reflection.reflector(input_names=spec.input_names, tools=c.program.tools,
                                           schedule=run.services.schedule)
        engine = SearchEngine(settings=search, merge=c.merge, seed_library=Library.empty(c.program.max_specialists),
                              train=train, val=val, services=run.services, reflector=reflector,
                              sampler=c.batch_sampler, observers=[tracker.on_proposal] if tracker else ())
        return run, engine

    def _result(self, run: AssembledRun, engine: SearchEngine, train: Sequence[Row], val: Sequence[Row],
                tracker: SearchTracker) -> RoutedProgram:
        from dspy_adaptive.lm.pool import endpoint_usage
        c = self.config
        result = AdaptiveGEPAResult.from_state(engine.state_dict(), row_results=run.evaluator.faulty,
                                               schedule=run.services.schedule.to_list(), log_dir=c.run.log_dir,
                                               sandbox=sandbox_record(run.pool))
        lms = (c.program.fast_lm, c.program.deep_lm, c.reflection.lm, dspy.settings.lm)
        endpoints = endpoint_usage(*{id(lm): lm for lm in lms if lm is not None}.values())
        if endpoints:
            result = dataclasses.replace(result, endpoints=endpoints)
        routed = run.returned(engine.archive[engine.archive.best_index()].library)
        if c.run.distill_router:
            from dspy_adaptive.distill.compile import distill_after_compile
            result = dataclasses.replace(result, distilled_router=distill_after_compile(
                routed, train, val, c.run.distill_router, run.threads))
        if c.run.track_stats:
            routed.detailed_results = DetailedResults.build(result, run.base, val, run.evaluator.cache,
                                                            track_best_outputs=c.run.track_best_outputs)

        def write(directory: Path) -> None:
            write_run_record(result, directory)
            routed.export(directory / "best_library")

        if c.run.log_dir:
            write(Path(c.run.log_dir))
        if tracker:
            log_run_artifacts(tracker, c.run.log_dir, write)
            tracker.finish()
        return routed

    def get_params(self) -> dict[str, Any]:
        hidden = ("metric", "metric_fn", "reflection_lm", "fast_lm", "deep_lm", "tools", "batch_sampler", "config")
        return {k: v for k, v in self.__dict__.items() if k not in hidden + ("sandbox_settings",)}


__all__ = ["AdaptiveGEPA", "ResumeMismatchError", "SandboxSettings", "UnknownArgumentError"]
