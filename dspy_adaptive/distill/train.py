"""Training a distilled router with scikit-learn: candidates, held-out selection, calibration, threshold.

Every candidate is a `LogisticRegression` over one kind of features, calibrated by temperature scaling on
out-of-fold scores (`CalibratedClassifierCV(method="temperature", ensemble=False)`):

* `tfidf-word` / `tfidf-char`: TF-IDF over words and word bigrams / over character n-grams (+ shape tokens,
  `text.py`), every term up to `max_features`;
* `binary-word` / `binary-char`: the same terms as presence indicators, the `select_k` terms most associated
  with the slots kept (chi-squared): few, strong features, which learn a router that turns on a handful of
  cues ("$", a question mark, a length) from few requests, where TF-IDF's normalisation dilutes them;
* `embedding:<name>`: a local text embedding (offered when one is available, `dspy_adaptive.distill.embed`).

Selection is on held-out requests: stratified K-fold over the labelled requests, each fold's pipeline
(vocabulary, term selection, classifier) fitted on the other folds only, the temperature fitted on the
out-of-fold scores (with Platt's out-of-sample targets: `fit_temperature`). The candidate with the highest
held-out agreement with the LM router wins (ties: the one that answers more requests itself at the target
agreement). Unless a threshold is given,
the threshold is the lowest confidence at which the winner's held-out answers agree with the LM router at
`target_agreement` or better; a request below it is left to the LM router. The final model is the winner
refitted on every labelled request with that temperature: what `CalibratedClassifierCV(method="temperature",
ensemble=False)` computes with the same folds, but for the smoothed targets (tests/distill checks both).

A slot the LM router chose for fewer than `MIN_CLASS_EXAMPLES` requests cannot be learnt or calibrated: its
requests are left out of training and count against the held-out agreement (they are scored by the final
model, which never saw them), so the threshold keeps its promise on them too.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from dspy_adaptive.distill.embed import available_embedders, embed
from dspy_adaptive.distill.model import Binding, DistilledRouter, EmbeddingFeatures, TfidfFeatures
from dspy_adaptive.distill.text import ANALYZERS

MIN_CLASS_EXAMPLES = 4
TERM_CANDIDATES = ("tfidf-word", "tfidf-char", "binary-word", "binary-char")
#: tried by default (tfidf-char costs the most to fit and was the least accurate on the benchmark mixture)
DEFAULT_CANDIDATES = ("tfidf-word", "binary-word", "binary-char")


class DistillError(RuntimeError):
    """No distilled router could be built from these requests (the reason says why); the LM router serves."""


@dataclass(frozen=True)
class DistillSettings:
    """How `distill_router` trains.

    Args:
        threshold: the confidence below which the LM router decides; None (default): the lowest confidence
            at which held-out answers agree with the LM router at `target_agreement`.
        target_agreement: the held-out agreement required of the requests the distilled router answers.
        min_threshold: the automatic threshold is never below this.
        candidates: feature kinds to try ("tfidf-word", "tfidf-char", "binary-word", "binary-char",
            "embedding:<name>"); None: `DEFAULT_CANDIDATES` and every available embedder.
        max_features: the TF-IDF vocabulary's size limit (most frequent terms).
        select_k: terms kept (chi-squared) by the binary candidates.
        C: the logistic regression's inverse regularisation strength.
        folds: held-out folds for selection (fewer when a slot has fewer requests).
        seed: the folds' shuffle seed.
        requests: more requests to label with the LM router and learn from (e.g. logged traffic), used by
            `AdaptiveGEPA(distill_router=...)` besides the train and validation requests.
        num_threads: parallel LM router calls while labelling (None: dspy.settings.num_threads, else 8).
    """

    threshold: float | None = None
    target_agreement: float = 0.98
    min_threshold: float = 0.5
    candidates: tuple[str, ...] | None = None
    max_features: int = 5000
    select_k: int = 100
    C: float = 10.0
    folds: int = 5
    seed: int = 0
    requests: tuple[Any, ...] = field(default=())
    num_threads: int | None = None

    def __post_init__(self) -> None:
        if self.threshold is not None and (isinstance(self.threshold, bool) or not 0.0 <= self.threshold <= 1.0):
            raise ValueError(f"threshold must be None or a number in [0, 1], got {self.threshold!r}")
        if not 0.5 <= self.target_agreement <= 1.0:
            raise ValueError(f"target_agreement must be in [0.5, 1], got {self.target_agreement!r}")
        if not 0.0 <= self.min_threshold <= 1.0:
            raise ValueError(f"min_threshold must be in [0, 1], got {self.min_threshold!r}")
        if not isinstance(self.folds, int) or self.folds < 2:
            raise ValueError(f"folds must be an integer >= 2, got {self.folds!r}")
        if self.max_features < 1 or self.select_k < 1 or self.C <= 0:
            raise ValueError("max_features and select_k must be >= 1 and C > 0")
        object.__setattr__(self, "requests", tuple(self.requests))
        for name in self.candidates or ():
            if name not in TERM_CANDIDATES and not name.startswith("embedding:"):
                raise ValueError(f"unknown candidate {name!r}: use {', '.join(TERM_CANDIDATES)} or embedding:<name>")

    def candidate_names(self) -> list[str]:
        if self.candidates is not None:
            return list(self.candidates)
        return list(DEFAULT_CANDIDATES) + [f"embedding:{name}" for name in available_embedders()]


# -- one candidate ------------------------------------------------------------------------------------------

def candidate_pipeline(name: str, settings: DistillSettings):
    """The scikit-learn pipeline of candidate `name`: texts (or, for an embedding, its vectors) -> slot."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    clf = LogisticRegression(C=settings.C, max_iter=5000)
    if name.startswith("embedding:"):
        return Pipeline([("clf", clf)])
    weighting, analyzer = name.split("-", 1)
    if weighting == "binary":
        from sklearn.feature_selection import SelectKBest, chi2

        vec = TfidfVectorizer(analyzer=ANALYZERS[analyzer], binary=True, use_idf=False, norm=None, dtype=np.float64)
        # (k above the vocabulary's size keeps every term; scikit-learn warns, _fit silences it)
        return Pipeline([("vec", vec), ("select", SelectKBest(chi2, k=settings.select_k)), ("clf", clf)])
    vec = TfidfVectorizer(analyzer=ANALYZERS[analyzer], sublinear_tf=True, max_features=settings.max_features,
                          dtype=np.float64)
    return Pipeline([("vec", vec), ("clf", clf)])


def _fit(pipe, x: Any, y: np.ndarray):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # convergence chatter on tiny folds, k above a tiny vocabulary
        return pipe.fit(x, y)


def _logits(pipe, x: Any) -> np.ndarray:
    z = np.asarray(pipe.decision_function(x), dtype=float)
    return np.column_stack([-z, z]) if z.ndim == 1 else z


def fit_temperature(logits: np.ndarray, labels: np.ndarray, smoothing: bool = True) -> float:
    """The inverse temperature beta minimising the log loss of softmax(beta * logits) against `labels` (column
    indices): scikit-learn's temperature scaling (CalibratedClassifierCV(method="temperature")) when `smoothing`
    is False. With `smoothing` (the default) the targets are Platt's out-of-sample ones, as scikit-learn's sigmoid
    calibration uses: (n + 1) / (n + 2) for the observed slot, the rest shared by the others. Without it, held-out
    scores that happen to separate every request drive beta to its bound and every confidence to 1.0 -- a
    certainty that a few dozen requests cannot show, and a threshold could not tell requests apart."""
    from scipy.optimize import minimize_scalar

    z = np.asarray(logits, dtype=float)
    idx = np.asarray(labels, dtype=int)
    n, k = z.shape
    targets = np.zeros_like(z)
    if smoothing and k > 1:
        top = (n + 1.0) / (n + 2.0)
        targets += (1.0 - top) / (k - 1)
        targets[np.arange(n), idx] = top
    else:
        targets[np.arange(n), idx] = 1.0

    def loss(log_beta: float) -> float:
        s = np.exp(log_beta) * z
        s = s - s.max(axis=1, keepdims=True)
        log_p = s - np.log(np.exp(s).sum(axis=1, keepdims=True))
        return float(-np.mean((targets * log_p).sum(axis=1)))

    return float(np.exp(minimize_scalar(loss, bounds=(-10.0, 10.0), method="bounded",
                                        options={"xatol": 1e-10}).x))


def extract(name: str, pipe, binding: Binding, beta: float, threshold: float = 1.0) -> DistilledRouter:
    """A fitted candidate pipeline as data (`DistilledRouter`)."""
    clf = pipe.named_steps["clf"]
    if name.startswith("embedding:"):
        feats = EmbeddingFeatures(name.split(":", 1)[1], int(clf.coef_.shape[1]))
    else:
        vec = pipe.named_steps["vec"]
        vocab = np.empty(len(vec.vocabulary_), dtype=object)
        for term, j in vec.vocabulary_.items():
            vocab[j] = term
        analyzer = name.split("-", 1)[1]
        if "select" in pipe.named_steps:
            keep = pipe.named_steps["select"].get_support()
            feats = TfidfFeatures(analyzer, tuple(vocab[keep]), None, False, "binary")
        else:
            feats = TfidfFeatures(analyzer, tuple(vocab), np.asarray(vec.idf_, dtype=float), True, "tfidf")
    return DistilledRouter(binding, feats, tuple(int(c) for c in clf.classes_), np.asarray(clf.coef_, dtype=float),
                           np.asarray(clf.intercept_, dtype=float), float(beta), threshold)


# -- held-out selection -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HeldOut:
    """One candidate's out-of-fold answers: the slot it picks and its confidence, per labelled request; and the
    calibration fitted on them."""

    name: str
    predicted: np.ndarray
    confidence: np.ndarray
    labels: np.ndarray
    beta: float = 1.0

    @property
    def agreement(self) -> float:
        return float(np.mean(self.predicted == self.labels))

    def served(self, threshold: float) -> dict[str, float]:
        """Held-out figures when requests under `threshold` go to the LM router (which agrees with itself)."""
        accepted = self.confidence >= threshold
        agree = np.where(accepted, self.predicted == self.labels, True)
        n_acc = int(accepted.sum())
        return {"threshold": float(threshold), "agreement": float(agree.mean()),
                "classifier_agreement": self.agreement,
                "answered_agreement": float(np.mean(self.predicted[accepted] == self.labels[accepted]))
                if n_acc else 1.0,
                "share_lm_router": float(1.0 - accepted.mean()), "requests": int(len(self.labels))}


def choose_threshold(held: HeldOut, target: float, floor: float) -> float | None:
    """The lowest confidence >= floor at which the answered held-out requests agree at `target` or better."""
    for t in sorted({float(c) for c in held.confidence if c >= floor} | {floor}):
        accepted = held.confidence >= t
        if accepted.any() and np.mean(held.predicted[accepted] == held.labels[accepted]) >= target:
            return t
    return None


def _inputs(name: str, texts: Sequence[str]) -> Any:
    """What a candidate's pipeline reads: the texts, or their vectors (computed once: an embedding does not
    depend on the labels, so no fold learns from another through it)."""
    if name.startswith("embedding:"):
        return embed(name.split(":", 1)[1], texts)
    return np.asarray(list(texts), dtype=object)


def held_out(name: str, texts: Sequence[str], labels: np.ndarray, rare: np.ndarray,
             settings: DistillSettings) -> HeldOut:
    """Out-of-fold answers of candidate `name` for every request: stratified K-fold, each fold's pipeline fitted
    (vocabulary, term selection, classifier) on the other folds; the temperature is fitted on the out-of-fold
    scores, as CalibratedClassifierCV(ensemble=False) fits it. Rare-slot requests are answered by the pipeline
    fitted on every trainable request, which never saw them."""
    from sklearn.base import clone
    from sklearn.model_selection import StratifiedKFold

    x_all = _inputs(name, texts)
    train_idx = np.flatnonzero(~rare)
    y = labels[train_idx]
    classes = np.unique(y)
    k = min(settings.folds, min(Counter(y.tolist()).values()))
    logits = np.zeros((len(train_idx), len(classes)))
    for fit_part, test_part in StratifiedKFold(k, shuffle=True, random_state=settings.seed).split(train_idx, y):
        pipe = _fit(clone(candidate_pipeline(name, settings)), x_all[train_idx[fit_part]], y[fit_part])
        logits[test_part] = _logits(pipe, x_all[train_idx[test_part]])
    beta = fit_temperature(logits, np.searchsorted(classes, y))
    proba = _softmax(beta * logits)
    predicted = np.zeros(len(labels), dtype=int)
    confidence = np.zeros(len(labels), dtype=float)
    predicted[train_idx] = classes[proba.argmax(axis=1)]
    confidence[train_idx] = proba.max(axis=1)
    if rare.any():
        pipe = _fit(candidate_pipeline(name, settings), x_all[train_idx], y)
        p_rare = _softmax(beta * _logits(pipe, x_all[np.flatnonzero(rare)]))
        predicted[rare] = classes[p_rare.argmax(axis=1)]
        confidence[rare] = p_rare.max(axis=1)
    return HeldOut(name, predicted, confidence, labels, beta)


def _softmax(z: np.ndarray) -> np.ndarray:
    from dspy_adaptive.distill.model import softmax_rows
    return softmax_rows(z)


def train_router(texts: Sequence[str], labels: Sequence[int], binding: Binding,
                 settings: DistillSettings | None = None) -> DistilledRouter:
    """Select, calibrate and fit a distilled router on `texts` labelled with the LM router's slots."""
    settings = settings or DistillSettings()
    y = np.asarray(labels, dtype=int)
    counts = Counter(y.tolist())
    rare = np.asarray([counts[v] < MIN_CLASS_EXAMPLES for v in y.tolist()], dtype=bool)
    trainable = sorted(c for c, n in counts.items() if n >= MIN_CLASS_EXAMPLES)
    label_counts = {str(k): v for k, v in sorted(counts.items())}
    if len(trainable) < 2:
        raise DistillError(f"the LM router's decisions on {len(y)} requests ({label_counts} by slot) leave fewer "
                           f"than two slots with {MIN_CLASS_EXAMPLES}+ requests: nothing to learn a choice from. "
                           "Pass more requests (e.g. logged traffic).")
    candidates: dict[str, HeldOut] = {}
    skipped: dict[str, str] = {}
    for name in settings.candidate_names():
        try:
            candidates[name] = held_out(name, texts, y, rare, settings)
        except Exception as e:  # noqa: BLE001 - a candidate that cannot be built is skipped, with the reason
            skipped[name] = f"{type(e).__name__}: {str(e)[:200]}"
    if not candidates:
        raise DistillError(f"no candidate could be trained: {skipped}")

    def rank(h: HeldOut) -> tuple[float, float]:
        t = choose_threshold(h, settings.target_agreement, settings.min_threshold)
        return h.agreement, 0.0 if t is None else 1.0 - h.served(t)["share_lm_router"]

    best = max(candidates.values(), key=rank)
    threshold = settings.threshold
    if threshold is None:
        threshold = choose_threshold(best, settings.target_agreement, settings.min_threshold)
        if threshold is None:
            raise DistillError(f"no confidence threshold makes the held-out answers of {best.name} agree with the "
                               f"LM router at {settings.target_agreement:.0%} (held-out agreement "
                               f"{best.agreement:.1%}); the LM router keeps deciding. Pass more requests or a "
                               "lower target_agreement.")
    keep = ~rare
    pipe = _fit(candidate_pipeline(best.name, settings), _inputs(best.name, texts)[keep], y[keep])
    model = extract(best.name, pipe, binding, best.beta, threshold)   # CalibratedClassifierCV(ensemble=False)
    training = {
        "requests": int(len(y)), "labels": label_counts, "chosen": best.name,
        "rare_slots": {str(c): n for c, n in sorted(counts.items()) if n < MIN_CLASS_EXAMPLES},
        "candidates": {n: {"agreement": round(h.agreement, 4),
                           "share_lm_router_at_target": round(h.served(t)["share_lm_router"], 4) if (
                               t := choose_threshold(h, settings.target_agreement, settings.min_threshold))
                           is not None else 1.0} for n, h in candidates.items()},
        "skipped_candidates": skipped,
        "heldout": {k: round(v, 4) if isinstance(v, float) else v for k, v in best.served(threshold).items()},
        "target_agreement": settings.target_agreement, "threshold_chosen": settings.threshold is None,
        "folds": int(min(settings.folds, min(counts[c] for c in trainable))),
    }
    return DistilledRouter(model.binding, model.features, model.classes, model.coef, model.intercept, model.beta,
                           float(threshold), training)


__all__ = ["DistillError", "DistillSettings", "HeldOut", "MIN_CLASS_EXAMPLES", "candidate_pipeline", "choose_threshold",
           "extract", "fit_temperature", "held_out", "train_router"]
