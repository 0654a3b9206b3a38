"""Topic-disjoint splits and measured split overlap (reference 001: held-out gains count only on topics the
optimizer never saw).

* `disjoint_split`: HotpotQA questions are assigned to train, validation and test so that no supporting
  article title appears in two splits (a question whose titles are already held by two different splits is
  left out, and the split sizes the run got are in its notes).
* `overlap_report`: for any family, how much each pair of splits shares -- supporting titles (where the family
  has them) and word 8-grams of the requests (the share of one split's requests that have an 8-gram in common
  with any request of the other). Written into every benchmark run's results.json and tables.md.
"""

from __future__ import annotations

import random
import re
from typing import Any, Callable, Iterable, Sequence

NGRAM = 8
_WORD = re.compile(r"\w+")


def disjoint_split(records: Sequence[dict[str, Any]], sizes: Sequence[int], rng: random.Random,
                   titles: Callable[[dict], Iterable[str]]) -> list[list[dict]]:
    """len(sizes) splits of at most sizes[i] records each, with no title in two splits. Records are taken in a
    random order; each goes to the split furthest below its size among those its titles do not conflict with
    (a title belongs to the first split that took it); a record whose titles already belong to two different
    splits is left out. Greedy per record rather than per connected topic group, so one very popular article
    costs only the questions that conflict, not a whole chained component."""
    order = list(records)
    rng.shuffle(order)
    out: list[list[dict]] = [[] for _ in sizes]
    owner: dict[str, int] = {}
    for r in order:
        ts = [str(t) for t in titles(r)]
        owners = {owner[t] for t in ts if t in owner}
        if len(owners) > 1:
            continue
        allowed = owners or set(range(len(sizes)))
        room = [(sizes[i] - len(out[i]), -i) for i in allowed if len(out[i]) < sizes[i]]
        if not room:
            continue
        i = -max(room)[1]
        out[i].append(r)
        for t in ts:
            owner.setdefault(t, i)
    return out


def ngrams(text: str, n: int = NGRAM) -> set[tuple[str, ...]]:
    words = _WORD.findall(str(text).lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def overlap_report(splits: dict[str, Sequence[Any]], request: Callable[[Any], str],
                   titles: Callable[[Any], Iterable[str]] | None = None) -> dict[str, dict[str, Any]]:
    """{"train~val": {...}, "train~test": {...}, "val~test": {...}}: shared titles (count), and the share of
    the second split's requests with a word 8-gram in common with the first's."""
    names = list(splits)
    out: dict[str, dict[str, Any]] = {}
    for i, a in enumerate(names):
        grams_a = set().union(*(ngrams(request(x)) for x in splits[a])) if splits[a] else set()
        titles_a = {t for x in splits[a] for t in titles(x)} if titles else set()
        for b in names[i + 1:]:
            rows_b = list(splits[b])
            hits = sum(1 for x in rows_b if ngrams(request(x)) & grams_a)
            entry: dict[str, Any] = {"ngram_share": hits / len(rows_b) if rows_b else 0.0, "ngram_requests": hits}
            if titles:
                shared = titles_a & {t for x in rows_b for t in titles(x)}
                entry["shared_titles"] = len(shared)
            out[f"{a}~{b}"] = entry
    return out


def family_overlap(family: str, train: Sequence[Any], val: Sequence[Any], test: Sequence[Any]) -> dict[str, Any]:
    """`overlap_report` for one family's dspy.Example splits (titles for HotpotQA)."""
    titles = (lambda ex: list(ex.get("supporting_titles") or [])) if family == "hotpotqa" else None
    return overlap_report({"train": train, "val": val, "test": test}, lambda ex: ex.get("request") or "", titles)
