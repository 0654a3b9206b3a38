"""Retrieval for HotpotQA-style requests: `search(query, k=3) -> list[str]` of "title | text" passages.

Backends, in the order `make_search_tool(backend="auto")` tries them:

1. ColBERTv2 server through `dspy.ColBERTv2(url=...)` when a URL is given or set in
   `$DSPY_ADAPTIVE_COLBERT_URL` (the paper's setting: ColBERTv2 over wiki17 abstracts, e.g. DSPy's
   hosted `http://20.102.90.50:2017/wiki17_abstracts`).
2. A local colbert-ai index (`colbert_index=` path, optional extra `pip install -e .[colbert]`);
   the import is guarded — without the package this backend is skipped (untested here).
3. BM25 (bm25s, English stopwords, no stemming) over a corpus JSONL of `{"title", "sentences"}`
   rows given as `corpus_path` (the demo passes its own corpus; the benchmark scripts pass the
   `hotpotqa_paragraphs.jsonl` sample, a small stand-in whose gold paragraphs are all present, so
   retrieval is far easier than over 5M abstracts).

`make_search_tool(...)` returns a plain function named `search` with JSON-compatible input and
output, suitable for handing to sandboxed specialists by name.
"""

from __future__ import annotations

import json
import logging
import os
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

logger = logging.getLogger(__name__)

MAX_K = 100
COLBERT_URL_ENV = "DSPY_ADAPTIVE_COLBERT_URL"


def passage_text(title: str, sentences: Sequence[str] | str) -> str:
    body = sentences if isinstance(sentences, str) else "".join(sentences)
    return f"{title} | {body.strip()}"


class BM25Retriever:
    """In-memory BM25 over passages ("title | text" strings)."""

    def __init__(self, passages: Sequence[str]):
        import bm25s

        if not passages:
            raise ValueError("BM25Retriever needs at least one passage")
        self.passages = list(passages)
        self._bm25s = bm25s
        self._index = bm25s.BM25()
        corpus_tokens = bm25s.tokenize(self.passages, stopwords="en", show_progress=False)
        self._vocab = set(corpus_tokens.vocab)
        self._index.index(corpus_tokens, show_progress=False)

    @classmethod
    def from_jsonl(cls, path: str | Path) -> "BM25Retriever":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"retrieval corpus not found: {path}. Pass corpus_path= to a JSONL file of "
                                    '{"title", "sentences"} rows, or configure a ColBERTv2 server url.')
        with path.open(encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        return cls([passage_text(r["title"], r["sentences"]) for r in rows])

    def __call__(self, query: str, k: int = 3) -> list[str]:
        k = min(k, len(self.passages))
        tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)
        tokens = [[t for t in tokens[0] if t in self._vocab]]
        if not tokens[0]:  # only stopwords, punctuation or words absent from the corpus
            return []
        docs, scores = self._index.retrieve(tokens, k=k, show_progress=False)
        return [self.passages[int(d)] for d, s in zip(docs[0], scores[0]) if s > 0]


class ColBERTv2Retriever:
    """A ColBERTv2 server (DSPy's client); passages come back as "title | text"."""

    def __init__(self, url: str):
        import dspy

        self.url = url
        self._client = dspy.ColBERTv2(url=url)

    def __call__(self, query: str, k: int = 3) -> list[str]:
        return [str(p["long_text"]) for p in self._client(query, k=k)]


class LocalColBERTRetriever:  # pragma: no cover - needs the optional colbert-ai extra and an index
    """A local colbert-ai index (`colbert.Searcher`); the collection rows are "title | text"."""

    def __init__(self, index: str, collection: str | None = None):
        from colbert import Searcher

        self._searcher = Searcher(index=index, collection=collection)

    def __call__(self, query: str, k: int = 3) -> list[str]:
        pids, _ranks, _scores = self._searcher.search(query, k=k)
        return [str(self._searcher.collection[pid]) for pid in pids]


def _colbert_available() -> bool:
    try:
        import colbert  # noqa: F401
    except Exception:  # noqa: BLE001 - optional extra
        return False
    return True


@lru_cache(maxsize=8)
def _bm25_for(path: str) -> BM25Retriever:
    return BM25Retriever.from_jsonl(path)


def make_retriever(backend: str = "auto", url: str | None = None, corpus_path: str | Path | None = None,
                   colbert_index: str | None = None, colbert_collection: str | None = None) -> Callable:
    """The retriever object behind `make_search_tool` (`backend`: auto | colbertv2 | colbert_local | bm25)."""
    url = url or os.environ.get(COLBERT_URL_ENV)
    if backend not in ("auto", "colbertv2", "colbert_local", "bm25"):
        raise ValueError(f"unknown retrieval backend {backend!r}: use auto, colbertv2, colbert_local or bm25")
    if backend == "colbertv2" or (backend == "auto" and url):
        if not url:
            raise ValueError(f"backend='colbertv2' needs url= or ${COLBERT_URL_ENV}")
        return ColBERTv2Retriever(url)
    if backend == "colbert_local" or (backend == "auto" and colbert_index):
        if _colbert_available() and colbert_index:
            return LocalColBERTRetriever(colbert_index, colbert_collection)
        if backend == "colbert_local":
            raise ImportError("backend='colbert_local' needs colbert-ai (pip install -e .[colbert]) and colbert_index=")
        logger.warning("colbert-ai is not installed; falling back to BM25 retrieval")
    if corpus_path is None:
        raise ValueError("BM25 retrieval needs corpus_path= (a JSONL file of {\"title\", \"sentences\"} rows); "
                         f"or pass url= / set ${COLBERT_URL_ENV} for a ColBERTv2 server")
    return _bm25_for(str(Path(corpus_path).resolve()))


def make_search_tool(backend: str = "auto", url: str | None = None, corpus_path: str | Path | None = None,
                     colbert_index: str | None = None, colbert_collection: str | None = None) -> Callable:
    """A plain function `search(query: str, k: int = 3) -> list[str]` over the chosen backend."""
    retriever = make_retriever(backend, url, corpus_path, colbert_index, colbert_collection)

    def search(query: str, k: int = 3) -> list[str]:
        """Search Wikipedia abstracts; returns up to k passages formatted "title | text"."""
        if not isinstance(query, str):
            raise TypeError(f"search(query) needs a string, got {type(query).__name__}")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise ValueError(f"search(k) must be an integer from 1 to {MAX_K}, got {k!r}")
        if not query.strip():
            return []
        return [str(p) for p in retriever(query, k)]

    search.backend = type(retriever).__name__  # type: ignore[attr-defined]
    return search


__all__ = ["BM25Retriever", "ColBERTv2Retriever", "LocalColBERTRetriever", "make_retriever", "make_search_tool",
           "passage_text"]
