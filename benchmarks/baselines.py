"""Baselines for the benchmark mixture (paper Table 2, Appendix D), on the same data, metric, tools and LMs.

* ``seed``: the generic seed P0 (`dspy_adaptive.tasks.programs.SeedProgram`), no optimisation.
* ``gepa-fpa-all``: `dspy.GEPA` over ONE full program, a `SandboxedFlex` (a `dspy.Flex` subclass).
  dspy.GEPA recognises Flex modules by ``isinstance`` (`gepa_flex_utils.enumerate_flex_submodules`),
  seeds the candidate with ``module_src``, proposes whole new sources with its built-in code proposer
  (`CodeProposalSignature` on the reflection LM) and rebinds them with ``flex._bind_code(src)``.
  Flex normally runs that source in DSPy's Deno/Pyodide interpreter, which cannot start here; a
  SandboxedFlex runs it through OUR sandbox instead (`compile_program` static policy +
  `SandboxPool` worker processes), with predictor calls bridged back to the host and executed on one
  global execution profile LM (the paper's FPA program "must choose one global execution profile"),
  and tools called by name. Failure semantics, as in dspy.GEPA:
    - a source that does not parse raises `SyntaxError` in ``_bind_code``; `DspyAdapter.evaluate`
      catches it and scores the whole batch ``failure_score``;
    - a source the sandbox policy rejects (or that has no dspy.Module class) raises
      `SpecialistError(kind="policy")` at ``forward``; dspy's trace capture turns that into a
      `FailedPrediction` whose text (the policy reasons) the code proposer reads, and the example scores
      ``failure_score``. Runtime errors inside the sandbox behave the same way.
  Our sandbox's dspy shim offers Predict, ChainOfThought, Signature, Prediction, InputField and
  OutputField (no RLM/ReActV2); the context shown to the code proposer says so.
* ``per-family-fpa``: four GEPA-FPA runs at budget/4, one per family's own train/val split, combined
  into a `LabelRoutedProgram` that picks the family's program by the TRUE hidden ``family`` label. It
  is a reference that sees labels at inference (the paper's "oracle routing"), used only at test time.
* ``mop``: Mixture-of-Prompts (Wang et al., 2024) following the official procedure (K-means-auto with the
  penalised inertia, demos per expert = total / N, instruction candidates from the other regions' demos in
  one shared pool kept by APE score, region-based joint search with the region's demos): `benchmarks.mop`.
"""

from __future__ import annotations

import ast
import random
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import dspy

from dspy_adaptive.program.routed import PredictorBridge, bridged_predictor, normalise_tools
from dspy_adaptive.sandbox import SandboxPool, SpecialistError, attach_tool_calls, compile_program
from dspy_adaptive.sandbox.allowlist import prompt_text
from dspy_adaptive.tasks.programs import GenericTask, SeedProgram

# -----------------------------------------------------------------------------------------------
# GEPA-FPA: a dspy.Flex that runs its module_src in our sandbox
# -----------------------------------------------------------------------------------------------

SANDBOX_NOTE = (
    "This module runs in a restricted Python sandbox. Its dspy provides only dspy.Module, dspy.Predict, "
    "dspy.ChainOfThought, dspy.Signature, dspy.InputField, dspy.OutputField and dspy.Prediction "
    "(dspy.RLM / dspy.ReActV2 are NOT available: call the tools above directly as plain functions). "
    f"{prompt_text()} No files, processes, network, eval/exec or names starting with an underscore. "
    "Predictors take keyword arguments; a predictor may be built as dspy.Predict(\"a, b -> c\", "
    "instructions=\"...\"). forward must return dspy.Prediction(response=...); a program that sends a "
    "request to ask_external_llm must also return that exact text as external_request."
)


def _no_interpreter():  # pragma: no cover - never called: SandboxedFlex does not use Flex's interpreter
    raise RuntimeError("SandboxedFlex runs module_src in dspy_adaptive's sandbox, not a CodeInterpreter")


class _FlexRuntime:
    """What every copy of one SandboxedFlex shares: the profile LM, tools, sandbox pool, predictor cache."""

    def __init__(self, lm: Any, tools: Mapping[str, Callable], pool: SandboxPool | None):
        self.lm = lm
        self.tools = dict(tools)
        self._pool = pool
        self._owns_pool = pool is None
        self._lock = threading.Lock()
        self._predictors: dict[tuple, dspy.Module] = {}

    @property
    def pool(self) -> SandboxPool:
        with self._lock:
            if self._pool is None:
                self._pool = SandboxPool(tool_names=tuple(self.tools))
            return self._pool

    def predictor(self, name: str, kind: str, signature: str, instructions: str | None) -> dspy.Module:
        key = (name, kind, signature, instructions)
        with self._lock:
            if key not in self._predictors:
                self._predictors[key] = bridged_predictor(kind, signature, instructions)
            return self._predictors[key]


def _named_tool(name: str, fn: Callable) -> Any:
    return fn if getattr(fn, "__name__", None) == name else dspy.Tool(fn, name=name)


class SandboxedFlex(dspy.Flex):
    """A `dspy.Flex` whose optimizable ``module_src`` runs in dspy_adaptive's sandbox (see module docstring).

    `lm`: the one global execution-profile LM for every predictor call (None: the configured LM).
    `tools`: functions the source may call by name. `pool`: a shared `SandboxPool` (one is created lazily
    otherwise). `source`: initial module source (default: P0's behaviour, one `dspy.Predict`).
    """

    def __init__(self, signature: Any = GenericTask, *,
                 tools: Mapping[str, Callable] | Sequence[Callable] | None = None, lm: Any = None,
                 pool: SandboxPool | None = None, source: str | None = None):
        tools = normalise_tools(tools)
        super().__init__(signature, tools=[_named_tool(n, f) for n, f in tools.items()],
                         interpreter_factory=_no_interpreter, max_predictor_calls=None)
        self._runtime = _FlexRuntime(lm, tools, pool)
        if source is not None:
            self._bind_code(source)
        # the code proposer reads this blurb (gepa_flex_utils.flex_task_context)
        ctx = self._flex_ctx
        base_blurb = ctx.render_context_blurb
        ctx.render_context_blurb = lambda sandboxed=False: (  # type: ignore[method-assign]
            (base_blurb(False) + "\n\n" if ctx.tools else "") + SANDBOX_NOTE)

    # Flex's own bridge (Deno interpreter) is never used
    def _rebuild_bridge(self) -> None:
        self._bridge = None

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _baseline_src(self) -> str:
        """P0 as module source: one Predict over the signature, instructions kept (tools unused)."""
        cls = self._signature_cls
        ins = ", ".join(cls.input_fields)
        outs = ", ".join(cls.output_fields)
        instructions = (getattr(cls, "instructions", "") or "").strip()
        returns = ", ".join(f"{n}=result.{n}" for n in cls.output_fields)
        return (
            f"class {self._class_name()}(dspy.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            f"        self.predict = dspy.Predict({f'{ins} -> {outs}'!r}, instructions={instructions!r})\n"
            "\n"
            "    def forward(self, **inputs):\n"
            "        result = self.predict(**inputs)\n"
            f"        return dspy.Prediction({returns})\n"
        )

    def _bind_code(self, module_src: str) -> None:
        if not isinstance(module_src, str):
            raise SyntaxError(f"module_src must be a string, got {type(module_src).__name__}")
        ast.parse(module_src)  # SyntaxError -> dspy.GEPA scores the batch as failures
        self._module_src = module_src

    def forward(self, *args: Any, **kwargs: Any) -> dspy.Prediction:
        if args:
            raise TypeError("SandboxedFlex accepts keyword inputs only")
        compiled = compile_program(self._module_src)
        if not compiled.ok:
            raise SpecialistError("the module source was rejected: " + "; ".join(compiled.reasons), kind="policy")
        lm = self.lm or self._runtime.lm or dspy.settings.lm
        bridge = PredictorBridge(self._runtime.predictor, self._runtime.tools, lm, role_name="program")
        fields = self._runtime.pool.run(compiled.program, dict(kwargs), bridge)
        pred = dspy.Prediction(**fields)
        attach_tool_calls(pred, bridge.tool_calls)   # the PUPA metric judges what was really sent
        return pred

    def __deepcopy__(self, memo: dict) -> "SandboxedFlex":
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)           # shares the runtime (pool, tools, LM, predictor cache)
        for name in ("history", "callbacks"):
            if isinstance(self.__dict__.get(name), list):
                clone.__dict__[name] = list(self.__dict__[name])
        return clone


# -----------------------------------------------------------------------------------------------
# dspy.GEPA with the family-balanced sampler
# -----------------------------------------------------------------------------------------------

class GepaBatchSampler:
    """gepa's BatchSampler protocol over an AdaptiveGEPA-style sampler `(examples, size, rng) -> indices`.

    The rng is seeded once; a resumed dspy.GEPA run (its own log_dir state) restarts this rng, so
    resumed minibatches differ from an uninterrupted run's (gepa does not checkpoint sampler state).
    """

    def __init__(self, sampler: Callable, size: int, seed: int = 0):
        self.sampler, self.size, self.rng = sampler, size, random.Random(seed)

    def next_minibatch_ids(self, loader: Any, state: Any) -> list:
        ids = list(loader.all_ids())
        examples = loader.fetch(ids)
        return [ids[i] for i in self.sampler(examples, min(self.size, len(examples)), self.rng)]


@dataclass
class FPARun:
    program: SandboxedFlex
    module_src: str
    metric_calls: int
    best_val: float | None
    num_candidates: int


def run_gepa_fpa(*, trainset: Sequence[dspy.Example], valset: Sequence[dspy.Example], metric: Callable,
                 reflection_lm: Any, max_metric_calls: int, lm: Any, tools: Mapping[str, Callable],
                 pool: SandboxPool, sampler: Callable | None = None, minibatch_size: int = 3,
                 num_threads: int = 1, seed: int = 0, log_dir: str | None = None) -> FPARun:
    """One dspy.GEPA full-program (Flex) run; returns the best program and the scored calls it used."""
    student = SandboxedFlex(GenericTask, tools=tools, lm=lm, pool=pool)
    kwargs: dict[str, Any] = {}
    if sampler is not None:
        kwargs = dict(reflection_minibatch_size=None,
                      gepa_kwargs={"batch_sampler": GepaBatchSampler(sampler, minibatch_size, seed)})
    else:
        kwargs = dict(reflection_minibatch_size=minibatch_size)
    opt = dspy.GEPA(metric, reflection_lm=reflection_lm, max_metric_calls=max_metric_calls,
                    num_threads=num_threads, seed=seed, log_dir=log_dir, track_stats=True, **kwargs)
    best = opt.compile(student, trainset=list(trainset), valset=list(valset))
    res = best.detailed_results
    best_val = res.val_aggregate_scores[res.best_idx] if res.val_aggregate_scores else None
    return FPARun(best, best.module_src, int(res.total_metric_calls or 0), best_val, len(res.candidates))


class LabelRoutedProgram(dspy.Module):
    """Per-family GEPA-FPA reference: dispatches on the example's TRUE `family` label (sees labels!).

    Call `program.for_example(example)` to get the family's program; plain `forward(family=..., **inputs)`
    is also accepted. Only the benchmark's test evaluation uses it.
    """

    def __init__(self, programs: Mapping[str, dspy.Module]):
        super().__init__()
        self.programs = dict(programs)

    def for_example(self, example: Any) -> dspy.Module:
        return self.programs[example.family]

    def forward(self, family: str, **inputs: Any) -> dspy.Prediction:
        return self.programs[family](**inputs)


# -----------------------------------------------------------------------------------------------
# MoP: benchmarks.mop (re-exported here)
# -----------------------------------------------------------------------------------------------

from benchmarks.mop import (  # noqa: E402
    DspyEmbedder,
    HashedTfidfEmbedder,
    MoPProgram,
    MoPRun,
    ProposeInstruction,
    SentenceTransformerEmbedder,
    choose_k,
    demo_output,
    embedder_for,
    make_embedder,
    mop_from_spec,
    run_mop,
)


def seed_program() -> SeedProgram:
    return SeedProgram()


__all__ = ["DspyEmbedder", "FPARun", "GepaBatchSampler", "HashedTfidfEmbedder", "LabelRoutedProgram", "MoPProgram",
           "MoPRun", "ProposeInstruction", "SANDBOX_NOTE", "SandboxedFlex", "SentenceTransformerEmbedder", "choose_k",
           "demo_output", "embedder_for", "make_embedder", "mop_from_spec", "run_gepa_fpa", "run_mop", "seed_program"]
