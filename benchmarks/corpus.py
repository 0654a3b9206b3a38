"""The offline HotpotQA retrieval corpus and the note Table 2 prints about the retriever that ran.

Without a ColBERTv2 server (the paper's: ColBERTv2 over Wikipedia abstracts), the benchmark retrieves
with BM25 over every paragraph of the loaded HotpotQA split(s) (`FamilySplits.corpus`): each question's
two gold paragraphs sit among all the split's distractors (about 66k paragraphs for the full dev split
from the hub; 600 for the 60-question local sample), not in a tiny corpus made of gold paragraphs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

CORPUS_FILE = "hotpotqa_corpus.jsonl"


def write_corpus(paragraphs: Sequence[Mapping[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for p in paragraphs:
            f.write(json.dumps({"title": p["title"], "sentences": list(p["sentences"])}, ensure_ascii=False) + "\n")
    return path


def gold_coverage(paragraphs: Sequence[Mapping[str, Any]], examples: Sequence[Any]) -> float | None:
    """Share of the HotpotQA examples' supporting titles present in the corpus (None: no HotpotQA rows)."""
    titles = {p["title"] for p in paragraphs}
    gold = [t for ex in examples if getattr(ex, "family", None) == "hotpotqa" for t in ex.supporting_titles]
    return sum(t in titles for t in gold) / len(gold) if gold else None


def retrieval_note(info: Mapping[str, Any]) -> str:
    """One sentence for Table 2's notes: which retriever ran, over what."""
    if info.get("backend") == "ColBERTv2Retriever":
        return f"Retrieval: ColBERTv2 server ({info.get('url')})."
    if info.get("backend") == "LocalColBERTRetriever":
        return "Retrieval: local ColBERT index."
    cov = info.get("gold_coverage")
    cov_text = f"; {100 * cov:.0f}% of the questions' gold paragraphs are in it" if cov is not None else ""
    return (f"Retrieval: BM25 over {info.get('paragraphs')} paragraphs ({info.get('corpus_source')}){cov_text}. "
            "The paper used ColBERTv2 over Wikipedia abstracts, so HotpotQA scores are not comparable to its own.")


__all__ = ["CORPUS_FILE", "gold_coverage", "retrieval_note", "write_corpus"]
