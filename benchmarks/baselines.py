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
* ``mop``: Mixture-of-Prompts (Wang et al., 2024), as the paper's Appendix D reproduces it:
    - embedding: a deterministic offline hashed TF-IDF vector (word unigrams + bigrams hashed into
      ``dim`` buckets with sha1, smoothed IDF fitted on the train+val requests, L2-normalised), or a
      `dspy.Embedder(model)` when an embedding model string is given (the paper used a local Qwen3
      embedding model in place of MoP's hosted encoder);
    - clustering: `scipy.cluster.vq.kmeans2` with a seeded k-means++ init for K = 2..min(5, n-1);
      K is chosen by the highest mean silhouette coefficient (cosine distance on the normalised
      vectors); K = 1 when there are too few requests or no K has a positive silhouette;
    - routing: nearest centroid (cosine);
    - demonstrations (MoP's demo assignment): each expert's demos come from its own region, the training
      requests of its cluster that have a single gold output string (an ``answer`` field: HotpotQA and
      AIME); PUPA and LiveBench-IF requests join clustering and routing but give no demonstrations;
    - APE instruction induction: the reflection (proposal) LM reads input -> gold output pairs of the
      region (requests alone where a region has no gold strings) and writes the instruction that would
      produce them, ``num_candidates`` times;
    - region-based joint search (RBJS): every (instruction, demonstrations) pair of the region (the seed
      instruction and the induced ones, each with the region's demos and without) is scored on the
      region's validation rows; the best mean wins (ties -> the earlier pair: seed first, no demos first);
    - native budget: every program run + metric call above counts as a scored call and is reported;
      with the paper's sizes this is about 1k calls, independent of ``--budget``.
  Remaining differences from the paper's run: the default embedding is hashed TF-IDF (pass --embedder for
  a real embedding model; none ships offline), and MoP's own prompt templates are paraphrased.
"""

from __future__ import annotations

import ast
import hashlib
import random
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import dspy
import numpy as np

from dspy_adaptive.program.routed import PredictorBridge, RouteRecord, bridged_predictor, normalise_tools
from dspy_adaptive.program.scoring import score_example
from dspy_adaptive.reflection.traces import field_lines
from dspy_adaptive.sandbox import SandboxPool, SpecialistError, attach_tool_calls, compile_program
from dspy_adaptive.sandbox.allowlist import prompt_text
from dspy_adaptive.tasks import INPUT_FIELD, OUTPUT_FIELD
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
# MoP
# -----------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"[a-z0-9]+")


class HashedTfidfEmbedder:
    """Deterministic offline embedding: hashed word uni+bigrams, smoothed IDF, L2-normalised."""

    def __init__(self, dim: int = 512, idf: Sequence[float] | None = None):
        self.dim = dim
        self.idf = np.asarray(idf, dtype=float) if idf is not None else None

    def _counts(self, text: str) -> np.ndarray:
        toks = _TOKEN.findall(str(text).lower())
        grams = toks + [f"{a} {b}" for a, b in zip(toks, toks[1:])]
        v = np.zeros(self.dim)
        for g in grams:
            v[int(hashlib.sha1(g.encode()).hexdigest()[:8], 16) % self.dim] += 1.0
        return v

    def fit(self, texts: Sequence[str]) -> "HashedTfidfEmbedder":
        df = np.zeros(self.dim)
        for t in texts:
            df += self._counts(t) > 0
        self.idf = np.log((1 + len(texts)) / (1 + df)) + 1.0
        return self

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if self.idf is None:
            raise RuntimeError("HashedTfidfEmbedder.fit() must run first")
        X = np.stack([np.log1p(self._counts(t)) * self.idf for t in texts]) if texts else np.zeros((0, self.dim))
        return _normalise(X)

    def state(self) -> dict[str, Any]:
        return {"kind": "hashed_tfidf", "dim": self.dim, "idf": [float(x) for x in self.idf]}


class DspyEmbedder:
    """`dspy.Embedder(model)` (e.g. a litellm embedding model string), L2-normalised."""

    def __init__(self, model: str):
        self.model = model
        self._embedder = dspy.Embedder(model)

    def fit(self, texts: Sequence[str]) -> "DspyEmbedder":
        return self

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return _normalise(np.asarray(self._embedder(list(texts)), dtype=float))

    def state(self) -> dict[str, Any]:
        return {"kind": "dspy", "model": self.model}


def make_embedder(state: Mapping[str, Any]) -> Any:
    if state["kind"] == "dspy":
        return DspyEmbedder(state["model"])
    return HashedTfidfEmbedder(state["dim"], state["idf"])


def _normalise(X: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(n == 0, 1.0, n)


def silhouette(X: np.ndarray, labels: np.ndarray) -> float:
    """Mean silhouette coefficient with cosine distance (rows of X are unit vectors)."""
    D = np.clip(1.0 - X @ X.T, 0.0, 2.0)
    ks = np.unique(labels)
    if len(ks) < 2:
        return -1.0
    s = []
    for i in range(len(X)):
        same = labels == labels[i]
        if same.sum() <= 1:
            s.append(0.0)
            continue
        a = D[i, same].sum() / (same.sum() - 1)
        b = min(D[i, labels == k].mean() for k in ks if k != labels[i])
        s.append((b - a) / max(a, b) if max(a, b) > 0 else 0.0)
    return float(np.mean(s))


def choose_clusters(X: np.ndarray, max_k: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict[int, float]]:
    """(centroids, labels, silhouette per K). K in 2..min(max_k, n-1) by best silhouette; else K=1."""
    from scipy.cluster.vq import kmeans2

    n = len(X)
    scores: dict[int, float] = {}
    best = None
    for k in range(2, min(max_k, n - 1) + 1):
        cents, labels = kmeans2(X, k, minit="++", seed=np.random.default_rng(seed + k), iter=50)
        if len(np.unique(labels)) < k:
            continue
        cents = _normalise(cents)
        labels = np.argmax(X @ cents.T, axis=1)           # nearest centroid (cosine), as routing does
        if len(np.unique(labels)) < k:
            continue
        scores[k] = silhouette(X, labels)
        if scores[k] > 0 and (best is None or scores[k] > best[0]):
            best = (scores[k], cents, labels)
    if best is None:
        cent = _normalise(X.mean(axis=0, keepdims=True)) if n else np.zeros((1, X.shape[1] if X.ndim == 2 else 1))
        return cent, np.zeros(n, dtype=int), scores
    return best[1], best[2], scores


class ProposeInstruction(dspy.Signature):
    """APE instruction induction. I gave a friend an instruction and some inputs. The friend read the
    instruction and wrote an output for every one of the inputs. Here are the input-output pairs (where
    no reference output exists, only the inputs). Write the instruction: one general instruction that
    would make a language model produce such outputs for inputs like these (what to do, what procedure
    helps, and the answer format). Do not copy example-specific answers into it."""

    examples: str = dspy.InputField(desc="input-output pairs of this group of requests")
    candidate_number: str = dspy.InputField(desc="which of several independent proposals this is")
    instruction: str = dspy.OutputField(desc="the instruction")


def demo_output(example: Any) -> str | None:
    """A training request's single gold output string (its ``answer``), or None (PUPA, LiveBench-IF)."""
    answer = example.get("answer") if hasattr(example, "get") else None
    return None if answer is None else str(answer)


class MoPProgram(dspy.Module):
    """Nearest-centroid router over per-cluster experts: P0's single predictor with the expert's instruction
    and demonstrations.

    The executed cluster is recorded as a `RouteRecord` on the prediction (`route_of(pred).executed`,
    1-based cluster number) so routing agreement can be measured like Adaptive-GEPA's.
    """

    def __init__(self, embedder: Any, centroids: np.ndarray, instructions: Sequence[str],
                 demos: Sequence[Sequence[Mapping[str, str]]] | None = None):
        super().__init__()
        self.embedder = embedder
        self.centroids = np.asarray(centroids, dtype=float)
        self.instructions = list(instructions)
        self.demos = [list(d) for d in (demos or [[] for _ in self.instructions])]
        self.experts = [_expert(t, d) for t, d in zip(self.instructions, self.demos)]

    def cluster_of(self, request: str) -> int:
        return int(np.argmax(self.embedder([request]) @ self.centroids.T, axis=1)[0])

    def forward(self, request: str) -> dspy.Prediction:
        k = self.cluster_of(request)
        pred = dspy.Prediction(response=self.experts[k](request=request).response)
        object.__setattr__(pred, "_adaptive_route", RouteRecord(k + 1, k + 1, str(k + 1), None))
        return pred


def _expert(instruction: str, demos: Sequence[Mapping[str, str]]) -> dspy.Predict:
    predictor = dspy.Predict(GenericTask.with_instructions(instruction))
    predictor.demos = [dspy.Example(request=d["request"], response=d["response"]) for d in demos]
    return predictor


@dataclass
class MoPRun:
    program: MoPProgram
    spec: dict[str, Any]
    metric_calls: int
    details: dict[str, Any] = field(default_factory=dict)


def _responding(predictor: dspy.Module) -> Callable[..., dspy.Prediction]:
    """An expert program: the predictor's `response` only."""
    return lambda **kw: dspy.Prediction(response=predictor(**kw).response)


def _evaluate(program: Callable, rows: Sequence[dspy.Example], metric: Callable, num_threads: int,
              desc: str) -> list[tuple[float, str, str]]:
    """(score, feedback, output) per row, scored by `score_example`: a failed run or metric scores 0."""
    def one(ex):
        r = score_example(program, ex, metric)
        return r.score, r.feedback, (r.output or {}).get(OUTPUT_FIELD, "")

    if not rows:
        return []
    from dspy.utils.parallelizer import ParallelExecutor
    return ParallelExecutor(num_threads=num_threads, disable_progress_bar=True).execute(one, list(rows))


def _ape_examples(region: Sequence[dspy.Example], rng: random.Random, n: int) -> str:
    """Input -> output pairs for APE-style instruction induction, quoted as the reflection prompt quotes
    texts (reflection.traces.field_lines), so no text can forge another example or an instruction."""
    rows = rng.sample(list(region), min(n, len(region)))
    parts = []
    for i, ex in enumerate(rows):
        out = demo_output(ex)
        lines = [f"### Example {i + 1}"] + field_lines("Input", ex[INPUT_FIELD], indent="", limit=1500)
        if out is not None:
            lines += field_lines("Output", out, indent="", limit=800)
        parts.append("\n".join(lines))
    return "\n\n".join(parts) or "(no examples)"


def run_mop(*, trainset: Sequence[dspy.Example], valset: Sequence[dspy.Example], metric: Callable,
            reflection_lm: Any, lm: Any, embedder: Any = None, max_k: int = 5, num_candidates: int = 3,
            induce_rows: int = 8, max_demos: int = 4, num_threads: int = 1, seed: int = 0,
            progress: bool = True) -> MoPRun:
    """MoP as reproduced in the module docstring. `lm` runs the experts (global profile); `reflection_lm`
    induces instructions (APE)."""
    from tqdm.auto import tqdm

    embedder = embedder or HashedTfidfEmbedder()
    embedder.fit([ex[INPUT_FIELD] for ex in list(trainset) + list(valset)])
    X = embedder([ex[INPUT_FIELD] for ex in trainset])
    cents, train_labels, sil = choose_clusters(X, max_k=max_k, seed=seed)
    K = len(cents)
    val_labels = np.argmax(embedder([ex[INPUT_FIELD] for ex in valset]) @ cents.T, axis=1) if valset else []
    seed_instruction = GenericTask.instructions
    proposer = dspy.Predict(ProposeInstruction)
    calls = 0
    chosen, chosen_demos = [], []
    details: dict[str, Any] = {"k": K, "silhouette": {str(k): v for k, v in sil.items()}, "clusters": []}
    rng = random.Random(seed)
    with dspy.context(lm=lm):
        for c in tqdm(range(K), desc="MoP clusters", disable=not progress):
            tr = [ex for ex, label in zip(trainset, train_labels) if label == c]
            va = [ex for ex, label in zip(valset, val_labels) if label == c]
            gold = [ex for ex in tr if demo_output(ex) is not None]
            demos = [{"request": ex[INPUT_FIELD], "response": demo_output(ex)}
                     for ex in rng.sample(gold, min(max_demos, len(gold)))]
            instructions = [seed_instruction]
            for j in range(num_candidates):                                        # APE induction
                try:
                    with dspy.context(lm=reflection_lm, trace=None):
                        out = proposer(examples=_ape_examples(gold or tr, rng, induce_rows),
                                       candidate_number=f"{j + 1} of {num_candidates}")
                    ins = str(out.instruction or "").strip()
                    if ins and ins not in instructions:
                        instructions.append(ins)
                except Exception:  # noqa: BLE001 - an unusable proposal is skipped
                    continue
            pairs = [(ins, d) for ins in instructions for d in ([[]] + ([demos] if demos else []))]
            means = []
            for ins, d in pairs:                                                   # region-based joint search
                res = _evaluate(_responding(_expert(ins, d)), va, metric, num_threads, "select")
                calls += len(va)
                means.append(sum(r[0] for r in res) / len(res) if res else 0.0)
            best = max(range(len(pairs)), key=lambda i: (means[i], -i))
            chosen.append(pairs[best][0])
            chosen_demos.append(pairs[best][1])
            details["clusters"].append({"cluster": c + 1, "train": len(tr), "val": len(va), "gold_demos": len(gold),
                                        "candidates": [{"instruction": ins, "demos": len(d)} for ins, d in pairs],
                                        "val_means": means, "chosen": best})
    program = MoPProgram(embedder, cents, chosen, chosen_demos)
    spec = {"embedder": embedder.state(), "centroids": cents.tolist(), "instructions": chosen,
            "demos": chosen_demos}
    return MoPRun(program, spec, calls, details)


def mop_from_spec(spec: Mapping[str, Any]) -> MoPProgram:
    return MoPProgram(make_embedder(spec["embedder"]), np.asarray(spec["centroids"]), spec["instructions"],
                      spec.get("demos"))


def seed_program() -> SeedProgram:
    return SeedProgram()


__all__ = ["DspyEmbedder", "FPARun", "GepaBatchSampler", "HashedTfidfEmbedder", "LabelRoutedProgram", "MoPProgram",
           "MoPRun", "ProposeInstruction", "SANDBOX_NOTE", "SandboxedFlex", "choose_clusters", "demo_output",
           "make_embedder", "mop_from_spec", "run_gepa_fpa", "run_mop", "seed_program", "silhouette"]
