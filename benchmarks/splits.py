"""Topic-disjoint splits and measured split overlap (reference 001: held-out gains count only on topics the
optimizer never saw).

* `disjoint_split`: HotpotQA questions are assigned to train, validation and test so that no supporting
  article title appears in two splits. Questions linked by shared titles (directly or through a chain) form
  one group (`topic_groups`: connected components), and a group goes to one split only; where the sizes cannot
  all be filled, the result says exactly why (`DisjointSplit.shortfall`).
* `overlap_report`: for any family, how much each pair of splits shares -- supporting titles (where the family
  has them) and word 8-grams of the requests (the share of one split's requests that have an 8-gram in common
  with any request of the other). Written into every benchmark run's results.json and tables.md.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

NGRAM = 8
_WORD = re.compile(r"\w+")
#: the exhaustive assignment search runs when (states x groups x splits) stays below this
EXACT_SEARCH_LIMIT = 3_000_000


def topic_groups(records: Sequence[Any], titles: Callable[[Any], Iterable[str]]) -> list[list[Any]]:
    """Connected groups of `records`: two records are in one group when they share a title, directly or through
    other records. Groups in order of their first record; records in their given order."""
    parent: dict[str, str] = {}

    def find(t: str) -> str:
        root = t
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[t] != root:
            parent[t], t = root, parent[t]
        return root

    keys = []
    for i, r in enumerate(records):
        ts = [str(t) for t in titles(r)] or [f"\0untitled:{i}"]     # a record without titles stands alone
        for t in ts[1:]:
            a, b = find(ts[0]), find(t)
            if a != b:
                parent[b] = a
        keys.append(ts[0])
    groups: dict[str, list[Any]] = {}
    for key, r in zip(keys, records):
        groups.setdefault(find(key), []).append(r)
    return list(groups.values())


@dataclass(frozen=True)
class DisjointSplit:
    """Splits with no title in two of them, and what limited them."""

    parts: tuple[list[Any], ...]
    wanted: tuple[int, ...]
    rows: int                  # records given
    groups: int                # groups of records linked by shared titles
    largest_group: int
    exhaustive: bool           # every assignment of whole groups was searched (none places more rows)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(len(p) for p in self.parts)

    def __iter__(self):
        return iter(self.parts)

    def shortfall(self, family: str, what: str) -> str | None:
        """Why the splits are smaller than wanted, in one sentence; None when they are not."""
        if self.sizes == self.wanted:
            return None
        left = self.rows - sum(self.sizes)
        reasons = []
        if self.rows < sum(self.wanted):
            reasons.append(f"not enough rows: {self.rows} for the {sum(self.wanted)} wanted")
        if left > 0:
            whole = ("every assignment of whole groups, searched exhaustively" if self.exhaustive else
                     "whole groups by most room and largest first (too many rows to search every assignment)")
            reasons.append(f"title conflicts: the {self.rows} rows form {self.groups} groups of questions linked by "
                           f"shared supporting titles (largest {self.largest_group} rows) and no title may be in two "
                           f"splits; the best of the assignments tried ({whole}; and dividing groups by leaving out "
                           f"the questions that link them) placed {self.sizes}")
        return (f"{family}: {what} wanted {self.wanted} but topic-disjointness placed {self.sizes}, {left} of the "
                f"{self.rows} rows left out -- " + "; ".join(reasons))


def disjoint_split(records: Sequence[Any], sizes: Sequence[int], rng: random.Random,
                   titles: Callable[[Any], Iterable[str]]) -> DisjointSplit:
    """len(sizes) splits of at most sizes[i] records each, no title in two splits. Groups of records sharing
    titles (`topic_groups`) are shuffled (and the records in each), then assignments are tried in turn until one
    fills every split, and the one placing the most rows is kept (ties: the earlier):

    1. record by record in group order, each into the split with the most room among those its titles allow
       (a record whose titles two splits already hold is left out, so a large group can be divided by
       leaving out the questions that link it);
    2. whole groups into the split with the most room (cut short at the room);
    3. every assignment of whole groups (each to one split, cut short at its room, or to none), searched
       exhaustively when the pool is small enough (`EXACT_SEARCH_LIMIT`): a full split wherever whole groups
       allow one; beyond that size, whole groups largest first into the split they fit best."""
    wanted = tuple(int(s) for s in sizes)
    groups = topic_groups(records, titles)
    rng.shuffle(groups)
    for g in groups:
        rng.shuffle(g)
    exhaustive = math.prod(s + 1 for s in wanted) * len(groups) * len(wanted) <= EXACT_SEARCH_LIMIT
    best: list[list[Any]] | None = None
    strategies = (lambda: _by_record([r for g in groups for r in g], wanted, titles),
                  lambda: _by_group(groups, wanted),
                  lambda: _exhaustive(groups, wanted) if exhaustive else _largest_first(groups, wanted))
    for strategy in strategies:
        parts = strategy()
        if best is None or sum(map(len, parts)) > sum(map(len, best)):
            best = parts
        if tuple(map(len, best)) == wanted or sum(map(len, best)) == len(records):
            break
    return DisjointSplit(tuple(best or [[] for _ in wanted]), wanted, len(records), len(groups),
                         max(map(len, groups), default=0), exhaustive)


def _by_record(order: Sequence[Any], sizes: tuple[int, ...], titles: Callable[[Any], Iterable[str]]) -> list[list]:
    out: list[list[Any]] = [[] for _ in sizes]
    owner: dict[str, int] = {}
    for r in order:
        ts = [str(t) for t in titles(r)]
        owners = {owner[t] for t in ts if t in owner}
        if len(owners) > 1:
            continue
        room = [(sizes[i] - len(out[i]), -i) for i in (owners or range(len(sizes))) if len(out[i]) < sizes[i]]
        if not room:
            continue
        i = -max(room)[1]
        out[i].append(r)
        for t in ts:
            owner.setdefault(t, i)
    return out


def _by_group(groups: Sequence[Sequence[Any]], sizes: tuple[int, ...]) -> list[list]:
    out: list[list[Any]] = [[] for _ in sizes]
    for g in groups:
        room = [(sizes[i] - len(out[i]), -i) for i in range(len(sizes)) if len(out[i]) < sizes[i]]
        if not room:
            break
        i = -max(room)[1]
        out[i] += g[:sizes[i] - len(out[i])]
    return out


def _largest_first(groups: Sequence[Sequence[Any]], sizes: tuple[int, ...]) -> list[list]:
    out: list[list[Any]] = [[] for _ in sizes]
    for g in sorted(groups, key=len, reverse=True):
        rooms = [(sizes[i] - len(out[i]), i) for i in range(len(sizes)) if len(out[i]) < sizes[i]]
        if not rooms:
            break
        fits = [r for r in rooms if r[0] >= len(g)]
        room, i = min(fits) if fits else max(rooms)
        out[i] += g[:room]
    return out


def _exhaustive(groups: Sequence[Sequence[Any]], sizes: tuple[int, ...]) -> list[list]:
    """The assignment of whole groups (each to one split, cut short at its room, or to none) placing the most
    rows: a search over the splits' fill levels, which stops once every split is full."""
    start = (0,) * len(sizes)
    back: dict[tuple[int, ...], tuple[tuple[int, ...], int, int] | None] = {start: None}
    for gi, g in enumerate(groups):
        for state in list(back):
            for i, size in enumerate(sizes):
                if state[i] < size:
                    nxt = state[:i] + (min(size, state[i] + len(g)),) + state[i + 1:]
                    if nxt not in back:
                        back[nxt] = (state, gi, i)
        if sizes in back:
            break
    state = max(back, key=sum)
    chosen: list[list[tuple[int, int]]] = [[] for _ in sizes]
    while back[state] is not None:
        prev, gi, i = back[state]
        chosen[i].append((gi, state[i] - prev[i]))
        state = prev
    return [[r for gi, take in sorted(c) for r in groups[gi][:take]] for c in chosen]


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
