"""A distilled router as data: features, a linear classifier, its calibration and its threshold.

A `DistilledRouter` is what `RoutedProgram.distill_router` trains and what the program saves. Its saved form
is JSON data only -- the features' vocabulary and idf weights (or the name of a registered embedder), the
classifier's coefficients and intercepts, the calibration's temperature, the threshold, what it is bound to
and how it was trained -- with a sha256 checksum over all of it. Nothing in it is executed: analyzers and
embedders are looked up by name in fixed tables (`text.ANALYZERS`, `embed`), and `from_dict` checks every
field (types, shapes, finite numbers, sizes, the checksum) and raises `DistilledRouterError` saying what is
wrong rather than loading a router that could misroute.

Serving needs numpy and scipy only: probabilities are computed here from the stored numbers exactly as
scikit-learn's `CalibratedClassifierCV(LogisticRegression, method="temperature")` computes them
(softmax(beta * logits); a two-class model's logits are (-z, z)).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from dspy_adaptive.distill.text import ANALYZERS, request_text

FORMAT = "dspy_adaptive.distilled_router"
VERSION = 1
MAX_FEATURES = 500_000
MAX_CLASSES = 256
MAX_TRAINING_BYTES = 200_000
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class DistilledRouterError(ValueError):
    """A distilled router's saved state is malformed, tampered with, or not for this program."""


@dataclass(frozen=True)
class Binding:
    """What the distilled router imitates: the LM router over one library (content hash), with one router
    predictor state (its demos), reading these input fields. Any change drops the distilled router."""

    library_hash: str
    router_hash: str
    input_names: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"library_hash": self.library_hash, "router_hash": self.router_hash,
                "input_names": list(self.input_names)}


@dataclass(frozen=True)
class Decision:
    """The distilled router's answer for one request: its slot, its calibrated confidence, and whether that
    confidence reaches the threshold (otherwise the LM router decides)."""

    slot: int
    confidence: float
    accepted: bool


def router_hash(demos: Any) -> str:
    """sha256 of the router predictor's demos (canonical JSON; objects by their text)."""
    data = [dict(d) if isinstance(d, Mapping) else (d.toDict() if hasattr(d, "toDict") else d) for d in demos or ()]
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def _checksum(payload: Mapping[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def softmax_rows(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


WEIGHTINGS = ("tfidf", "binary")


@dataclass(frozen=True, eq=False)
class TfidfFeatures:
    """Term features over one of `text.ANALYZERS`, as scikit-learn's TfidfVectorizer(analyzer=...) computes them
    with this vocabulary: weighting "tfidf" is counts (1 + log when sublinear) x idf, rows L2-normalised;
    "binary" is 1 for each vocabulary term present (no idf, no normalisation; `idf` is None)."""

    analyzer: str
    vocabulary: tuple[str, ...]
    idf: np.ndarray | None
    sublinear_tf: bool = True
    weighting: str = "tfidf"
    kind: str = field(default="tfidf", init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {t: i for i, t in enumerate(self.vocabulary)})

    @property
    def dim(self) -> int:
        return len(self.vocabulary)

    def transform(self, texts: Sequence[str]):
        from scipy.sparse import csr_matrix

        analyze, index = ANALYZERS[self.analyzer], self._index
        data: list[float] = []
        indices: list[int] = []
        indptr = [0]
        for text in texts:
            counts: dict[int, int] = {}
            for tok in analyze(text):
                j = index.get(tok)
                if j is not None:
                    counts[j] = counts.get(j, 0) + 1
            cols = sorted(counts)
            if self.weighting == "binary":
                vals = np.ones(len(cols))
            else:
                tf = np.asarray([counts[j] for j in cols], dtype=float)
                if self.sublinear_tf:
                    tf = 1.0 + np.log(tf) if len(tf) else tf
                vals = tf * self.idf[cols] if cols else tf
                norm = float(np.sqrt((vals ** 2).sum())) if len(vals) else 0.0
                if norm > 0:
                    vals = vals / norm
            data += vals.tolist()
            indices += cols
            indptr.append(len(indices))
        return csr_matrix((data, indices, indptr), shape=(len(texts), self.dim))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "tfidf", "analyzer": self.analyzer, "weighting": self.weighting,
                "vocabulary": list(self.vocabulary),
                "idf": None if self.idf is None else [float(x) for x in self.idf],
                "sublinear_tf": bool(self.sublinear_tf)}


@dataclass(frozen=True, eq=False)
class EmbeddingFeatures:
    """A registered text embedder's vectors (`dspy_adaptive.distill.embed`), by name."""

    embedder: str
    dim: int
    kind: str = field(default="embedding", init=False)

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        from dspy_adaptive.distill.embed import embed

        vectors = embed(self.embedder, texts)
        if vectors.shape != (len(texts), self.dim):
            raise DistilledRouterError(f"embedder {self.embedder!r} gave vectors of shape {vectors.shape}, the "
                                       f"distilled router was trained on {self.dim} dimensions")
        return vectors

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "embedding", "embedder": self.embedder, "dim": int(self.dim)}


Features = TfidfFeatures | EmbeddingFeatures


@dataclass(frozen=True, eq=False)
class DistilledRouter:
    """A calibrated linear classifier over request features that answers the LM router's question.

    `classes[i]` is the slot of probability column i (0 = the fallback). `coef` has one row per class, or
    one row for a two-class model (the second class's score). `beta` is the calibration's inverse
    temperature. A request whose top probability is below `threshold` is left to the LM router.
    """

    binding: Binding
    features: Features
    classes: tuple[int, ...]
    coef: np.ndarray
    intercept: np.ndarray
    beta: float
    threshold: float
    training: dict[str, Any] = field(default_factory=dict)

    # -- serving -------------------------------------------------------------------------------------
    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """Calibrated probabilities, one row per text, columns in `classes` order."""
        x = self.features.transform(list(texts))
        z = np.asarray(x @ self.coef.T, dtype=float) + self.intercept
        if len(self.classes) == 2 and z.shape[1] == 1:
            z = np.hstack([-z, z])
        return softmax_rows(self.beta * z)

    def decide_texts(self, texts: Sequence[str]) -> list[Decision]:
        proba = self.predict_proba(texts)
        out = []
        for row in proba:
            i = int(np.argmax(row))
            conf = float(row[i])
            out.append(Decision(int(self.classes[i]), conf, conf >= self.threshold))
        return out

    def decide(self, inputs: Mapping[str, Any]) -> Decision:
        """The decision for one request (its input fields)."""
        return self.decide_texts([request_text(inputs, self.binding.input_names)])[0]

    def with_threshold(self, threshold: float) -> "DistilledRouter":
        _check_threshold(threshold)
        return DistilledRouter(self.binding, self.features, self.classes, self.coef, self.intercept, self.beta,
                               float(threshold), dict(self.training))

    # -- the saved form ---------------------------------------------------------------------------------
    def payload(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "binding": self.binding.to_dict(),
                "features": self.features.to_dict(), "classes": [int(c) for c in self.classes],
                "coef": [[float(v) for v in row] for row in self.coef],
                "intercept": [float(v) for v in self.intercept], "beta": float(self.beta),
                "threshold": float(self.threshold), "training": self.training}

    def to_dict(self) -> dict[str, Any]:
        payload = self.payload()
        return {**payload, "checksum": _checksum(payload)}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True, ensure_ascii=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> "DistilledRouter":
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as e:
            raise DistilledRouterError(f"a distilled router file must be JSON; this one does not parse ({e})") from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Any) -> "DistilledRouter":
        """Check every field of a saved distilled router and build it; `DistilledRouterError` says what is wrong."""
        return _parse(data)

    def summary(self) -> dict[str, Any]:
        """What a person needs to know about it (export, reports)."""
        feats = self.features
        return {"features": (f"{feats.weighting} terms ({feats.analyzer} analyzer, {feats.dim} terms)"
                             if feats.kind == "tfidf" else f"embedding ({feats.embedder}, {feats.dim} dimensions)"),
                "classes": list(self.classes), "threshold": self.threshold, "beta": self.beta,
                "library_hash": self.binding.library_hash, **{k: v for k, v in self.training.items()
                                                              if k in ("requests", "labels", "heldout", "chosen")}}


# -- checking a saved router ------------------------------------------------------------------------------

def _fail(what: str) -> DistilledRouterError:
    return DistilledRouterError(f"refusing the distilled router: {what}. It was not loaded; the LM router decides "
                                "every request. Distill it again with routed.distill_router(requests).")


def _check_threshold(threshold: Any) -> None:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= float(threshold) <= 1.0:
        raise ValueError(f"threshold must be a number in [0, 1], got {threshold!r}")


def _floats(value: Any, name: str, length: int | None = None) -> np.ndarray:
    if not isinstance(value, list) or (length is not None and len(value) != length):
        want = f"a list of {length} numbers" if length is not None else "a list of numbers"
        raise _fail(f"{name} must be {want}")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise _fail(f"{name} holds something other than numbers")
    arr = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(arr)):
        raise _fail(f"{name} holds a value that is not finite")
    return arr


def _parse(data: Any) -> DistilledRouter:
    expected = {"format", "version", "binding", "features", "classes", "coef", "intercept", "beta", "threshold",
                "training", "checksum"}
    if not isinstance(data, dict):
        raise _fail(f"expected a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise _fail(f"format is {str(data.get('format'))[:60]!r}, not {FORMAT!r}")
    if data.get("version") != VERSION:
        raise _fail(f"version {str(data.get('version'))[:20]!r} is not the supported version {VERSION}")
    if set(data) != expected:
        extra, missing = sorted(set(data) - expected), sorted(expected - set(data))
        raise _fail(f"unexpected keys {extra[:5]} / missing keys {missing}")
    payload = {k: v for k, v in data.items() if k != "checksum"}
    try:
        digest = _checksum(payload)
    except (TypeError, ValueError) as e:
        raise _fail(f"its content is not plain JSON data ({e})") from None
    if data["checksum"] != digest:
        raise _fail("its checksum does not match its content (the file was edited or corrupted)")

    b = data["binding"]
    if not isinstance(b, dict) or set(b) != {"library_hash", "router_hash", "input_names"}:
        raise _fail("binding must hold exactly library_hash, router_hash and input_names")
    for key in ("library_hash", "router_hash"):
        if not isinstance(b[key], str) or not _HEX64.match(b[key]):
            raise _fail(f"binding.{key} must be a sha256 hex digest")
    names = b["input_names"]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.isidentifier() for n in names):
        raise _fail("binding.input_names must be a non-empty list of field names")
    binding = Binding(b["library_hash"], b["router_hash"], tuple(names))

    features = _parse_features(data["features"])
    classes = data["classes"]
    if (not isinstance(classes, list) or not 2 <= len(classes) <= MAX_CLASSES
            or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in classes)
            or len(set(classes)) != len(classes)):
        raise _fail(f"classes must be 2 to {MAX_CLASSES} distinct slot numbers (0 = the fallback)")
    rows = 1 if len(classes) == 2 else len(classes)
    coef = data["coef"]
    if not isinstance(coef, list) or len(coef) != rows:
        raise _fail(f"coef must have {rows} row(s) for {len(classes)} classes")
    coef_arr = np.vstack([_floats(r, f"coef[{i}]", features.dim) for i, r in enumerate(coef)])
    intercept = _floats(data["intercept"], "intercept", rows)
    beta = data["beta"]
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not np.isfinite(beta) or beta <= 0:
        raise _fail("beta (the calibration's inverse temperature) must be a positive finite number")
    try:
        _check_threshold(data["threshold"])
    except ValueError as e:
        raise _fail(str(e)) from None
    training = data["training"]
    if not isinstance(training, dict) or len(json.dumps(training)) > MAX_TRAINING_BYTES:
        raise _fail(f"training must be a JSON object of at most {MAX_TRAINING_BYTES} bytes")
    return DistilledRouter(binding, features, tuple(classes), coef_arr, intercept, float(beta),
                           float(data["threshold"]), training)


def _parse_features(f: Any) -> Features:
    if not isinstance(f, dict):
        raise _fail("features must be an object")
    kind = f.get("kind")
    if kind == "tfidf":
        if set(f) != {"kind", "analyzer", "weighting", "vocabulary", "idf", "sublinear_tf"}:
            raise _fail("tfidf features hold exactly kind, analyzer, weighting, vocabulary, idf and sublinear_tf")
        if f["weighting"] not in WEIGHTINGS:
            raise _fail(f"unknown term weighting {str(f['weighting'])[:40]!r} (known: {', '.join(WEIGHTINGS)})")
        if f["analyzer"] not in ANALYZERS:
            raise _fail(f"unknown analyzer {str(f['analyzer'])[:40]!r} (known: {', '.join(ANALYZERS)})")
        vocab = f["vocabulary"]
        if (not isinstance(vocab, list) or not 1 <= len(vocab) <= MAX_FEATURES
                or not all(isinstance(t, str) for t in vocab) or len(set(vocab)) != len(vocab)):
            raise _fail(f"vocabulary must be a list of 1 to {MAX_FEATURES} distinct terms")
        if f["weighting"] == "binary":
            if f["idf"] is not None:
                raise _fail("binary term features have no idf weights (idf must be null)")
            idf = None
        else:
            idf = _floats(f["idf"], "idf", len(vocab))
            if np.any(idf < 0):
                raise _fail("idf weights must not be negative")
        if not isinstance(f["sublinear_tf"], bool):
            raise _fail("sublinear_tf must be true or false")
        return TfidfFeatures(f["analyzer"], tuple(vocab), idf, f["sublinear_tf"], f["weighting"])
    if kind == "embedding":
        if set(f) != {"kind", "embedder", "dim"}:
            raise _fail("embedding features hold exactly kind, embedder and dim")
        if not isinstance(f["embedder"], str) or not re.match(r"^[\w.:/-]{1,200}$", f["embedder"]):
            raise _fail("embedding features name their embedder with a short plain name")
        dim = f["dim"]
        if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_FEATURES:
            raise _fail(f"embedding dim must be an integer in 1..{MAX_FEATURES}")
        return EmbeddingFeatures(f["embedder"], dim)
    raise _fail(f"unknown features kind {str(kind)[:40]!r} (tfidf or embedding)")


__all__ = ["Binding", "Decision", "DistilledRouter", "DistilledRouterError", "EmbeddingFeatures", "FORMAT",
           "TfidfFeatures", "VERSION", "router_hash"]
