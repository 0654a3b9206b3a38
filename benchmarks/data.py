"""Data loaders and splits for the benchmark mixture (paper Appendix C), local JSONL or Hugging Face.

Every example is `dspy.Example(...).with_inputs("request")` with

* input  `request` — the task as the user sends it (HotpotQA question, AIME problem, PUPA
  `user_query`, LiveBench-IF `turns[0]`);
* hidden `id` (unique, content-free: a hash of family + source id, so ids reveal no label),
  `family` in FAMILIES, `subtask` (LiveBench-IF `task`; None elsewhere), `source_id`, and the
  family's gold fields:
  - hotpotqa: `answer`, `supporting_titles`, `supporting_facts`, `type`, `level`
  - aime: `answer` (int), `answer_raw`, `solution` (None for 2025), `year`, `exam`, `problem_number`, `url`
  - pupa: `target_response`, `pii_units` (list[str]), `redacted_query`, `predicted_category`, `conversation_hash`
  - livebench_if: `instruction_id_list`, `instruction_kwargs` (null arguments dropped, as LiveBench's
    if_runner does), `task_prompt`, `release`, `citation`

Splits (train = feedback set, val = Pareto/validation set, test), `PAPER_SIZES`:

* HotpotQA 45/45/300: train sampled from the official train split; val and test disjoint samples
  of the official dev split (seeded).
* AIME 45/45/30: 2022–2024 pooled in canonical order, shuffled ONCE with the fixed
  `AIME_SHUFFLE_SEED` (the paper: "AIME and PUPA splits stay fixed" across seeds), halved into
  train/val; AIME 2025 is the test set.
* PUPA 45/45/221: positional partition of the first 443 rows into 111/111/221; the first 45 of
  each optimisation slice; all 221 test rows. Independent of the seed.
* LiveBench-IF 45/45/100: train from the 2024-06-24 release, val and test (disjoint) from the
  2024-11-25 release, each balanced across the 4 subtasks (remainder slots go to subtasks in a
  seeded order); train items whose source article or citation also occurs in the 2024-11-25 pool
  are excluded (the paper: "no source-article overlap").

Small data (e.g. the 60-row local HotpotQA and PUPA samples). When a pool cannot hold the
requested sizes, the sizes are scaled proportionally (largest-remainder rounding) so that the
splits stay disjoint; every such degradation is recorded in `notes`. Concretely, with the local
samples in ../shared/data: HotpotQA has no train split there (only 60 dev rows), so all three
splits are carved from the dev rows, 45:45:300 scaled to 7/7/46 (put a `hotpotqa_train.jsonl` in
the data dir to draw train from the official train split). PUPA's 111/111/221 partition is
scaled to the 60 rows as 15/15/30 and "first 45 of each slice" becomes the whole slice. AIME and
LiveBench-IF have enough rows for the paper's sizes.

Sources (`source="hf"`, needs the hub; isolated in `_hf_*` functions; revisions in `HF_SOURCES`):

* `hotpotqa/hotpot_qa`, config `distractor`, splits `train` / `validation` (dev), revision
  `1908d6afbbead072334abe2965f91bd2709910ab`. CC BY-SA 4.0.
* `AI-MO/aimo-validation-aime` (split `train`, AIME 2022–2024), revision
  `13f9e12f613e720c2a2b2f345dd04b998a29494d`; `MathArena/aime_2025` (split `train`), revision
  `c94da77eb22bbd6439e62a323bec18493a421302` (CC BY-NC-SA 4.0). Both pins are the snapshots the
  local sample was verified against (../shared/data/SOURCES.md).
* `Columbia-NLP/PUPA`, config `pupa_new`, split `train` (664 rows; the paper's 443-row pool is
  taken as its first 443 positions), revision `9981b49b6ced0033988a224b6712895ebf119294`. MIT.
* `livebench/instruction_following`, split `test`, revision `0868379c4b5cf62aeacaf8be4f08fced815c81bb`;
  releases by `livebench_release_date` 2024-06-24 (rotated out 2024-11-25) and 2024-11-25.
The paper used a "frozen parquet snapshot" whose revisions it does not publish. Every source is therefore
pinned here to a snapshot that public reproductions pin too (HotpotQA's and LiveBench-IF's by several
independent repositories, with the parquet files' sha256; PUPA's at the revision whose `PUPA_New.csv` has the
sha256 of the local sample, ../shared/data/SOURCES.md), so a run loads the same rows whenever it runs;
`revisions={"pupa": "<sha>", ...}` overrides a pin, and `benchmarks.run` records the revisions it loaded.

Local directory (`source="local"`): JSONL files in the schema of ../shared/data (see its
SOURCES.md): `hotpotqa.jsonl` (dev; optional `hotpotqa_train.jsonl`), `aime.jsonl`,
`pupa.jsonl`, `livebench_if.jsonl`. Default directory: `$DSPY_ADAPTIVE_BENCH_DATA`, else
`<repo>/../shared/data`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import dspy

from dspy_adaptive.tasks import FAMILIES, INPUT_FIELD
from dspy_adaptive.tasks.sampler import balanced_quotas

PAPER_SIZES: dict[str, tuple[int, int, int]] = {
    "hotpotqa": (45, 45, 300),
    "aime": (45, 45, 30),
    "pupa": (45, 45, 221),
    "livebench_if": (45, 45, 100),
}
DEFAULT_SEED = 43
AIME_SHUFFLE_SEED = 43          # fixed: the AIME split does not move with the mixture seed
AIME_TRAINVAL_YEARS = (2022, 2023, 2024)
AIME_TEST_YEAR = 2025
PUPA_SLICES = (111, 111, 221)   # positional train / val / test partition of a 443-row pool
LIVEBENCH_FEEDBACK_RELEASE = "2024-06-24"
LIVEBENCH_EVAL_RELEASE = "2024-11-25"

HF_SOURCES: dict[str, dict[str, Any]] = {
    "hotpotqa": {"path": "hotpotqa/hotpot_qa", "name": "distractor",
                 "revision": "1908d6afbbead072334abe2965f91bd2709910ab"},
    "aime_trainval": {"path": "AI-MO/aimo-validation-aime", "name": None, "split": "train",
                      "revision": "13f9e12f613e720c2a2b2f345dd04b998a29494d"},
    "aime_test": {"path": "MathArena/aime_2025", "name": None, "split": "train",
                  "revision": "c94da77eb22bbd6439e62a323bec18493a421302"},
    "pupa": {"path": "Columbia-NLP/PUPA", "name": "pupa_new", "split": "train",
             "revision": "9981b49b6ced0033988a224b6712895ebf119294"},
    "livebench_if": {"path": "livebench/instruction_following", "name": None, "split": "test",
                     "revision": "0868379c4b5cf62aeacaf8be4f08fced815c81bb"},
}
LOCAL_FILES = {"hotpotqa": "hotpotqa.jsonl", "aime": "aime.jsonl", "pupa": "pupa.jsonl",
               "livebench_if": "livebench_if.jsonl"}
HOTPOTQA_LOCAL_TRAIN = "hotpotqa_train.jsonl"
HOTPOTQA_CORPUS = "hotpotqa_paragraphs.jsonl"   # {"title", "sentences"} rows: the BM25 retrieval corpus


class DataError(FileNotFoundError):
    """Benchmark data could not be found or read; the message says which path and how to fix it."""


class SplitError(ValueError):
    """The data cannot give a family the splits asked for (e.g. an empty validation split); the message says why
    and what to change."""


# --------------------------------------------------------------------------- containers

@dataclass
class FamilySplits:
    family: str
    train: list[dspy.Example]
    val: list[dspy.Example]
    test: list[dspy.Example]
    notes: list[str] = field(default_factory=list)
    #: HotpotQA: every {"title", "sentences"} paragraph of the loaded split(s), deduplicated by title (the
    #: offline retrieval corpus: each question's gold paragraphs among all the split's distractors)
    corpus: list[dict[str, Any]] = field(default_factory=list)

    def sizes(self) -> tuple[int, int, int]:
        return len(self.train), len(self.val), len(self.test)


@dataclass
class Mixture:
    """The mixed splits (families concatenated in FAMILIES order) plus per-family access."""

    train: list[dspy.Example]
    val: list[dspy.Example]
    test: list[dspy.Example]
    families: dict[str, FamilySplits]
    seed: int
    source: str
    notes: list[str] = field(default_factory=list)

    def family(self, name: str) -> FamilySplits:
        if name not in self.families:
            raise KeyError(f"family {name!r} not loaded; loaded: {sorted(self.families)}")
        return self.families[name]

    def sizes(self) -> dict[str, tuple[int, int, int]]:
        return {f: s.sizes() for f, s in self.families.items()}


# --------------------------------------------------------------------------- helpers

def default_data_dir() -> Path:
    env = os.environ.get("DSPY_ADAPTIVE_BENCH_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DataError(
            f"benchmark data file not found: {path}. Pass data_dir= pointing at a directory of JSONL files "
            f"in the ../shared/data schema ({', '.join(LOCAL_FILES.values())}), set DSPY_ADAPTIVE_BENCH_DATA, "
            f"or load from Hugging Face with source='hf'.")
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def example_id(family: str, source_id: Any) -> str:
    """Stable, label-free id: a hash of family and source id (ids never name the family)."""
    return hashlib.sha256(f"{family}:{source_id}".encode()).hexdigest()[:16]


def make_example(family: str, source_id: Any, request: str, subtask: str | None = None,
                 **gold: Any) -> dspy.Example:
    if not isinstance(request, str) or not request.strip():
        raise ValueError(f"{family} item {source_id!r} has an empty request")
    return dspy.Example(id=example_id(family, source_id), request=request, family=family, subtask=subtask,
                        source_id=str(source_id), **gold).with_inputs(INPUT_FIELD)


def scale_sizes(requested: Sequence[int], available: int) -> tuple[int, ...]:
    """`requested` if it fits in `available`, else proportional shares (largest remainder, ties → earlier)."""
    requested = tuple(int(r) for r in requested)
    if any(r < 0 for r in requested):
        raise ValueError(f"split sizes must be non-negative, got {requested}")
    total = sum(requested)
    if total <= available:
        return requested
    exact = [r * available / total for r in requested]
    out = [int(x) for x in exact]
    order = sorted(range(len(out)), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[: available - sum(out)]:
        out[i] += 1
    return tuple(out)


def _dedupe(records: Iterable[dict[str, Any]], key: str = "id") -> list[dict[str, Any]]:
    seen, out = set(), []
    for r in records:
        if r[key] not in seen:
            seen.add(r[key])
            out.append(r)
    return out


def _note_scaling(notes: list[str], family: str, what: str, requested: Sequence[int], got: Sequence[int],
                  available: int) -> None:
    if tuple(requested) != tuple(got):
        notes.append(f"{family}: {what} requested {tuple(requested)} but only {available} rows are available; "
                     f"scaled proportionally to {tuple(got)} (splits stay disjoint)")


# --------------------------------------------------------------------------- HotpotQA

def _hotpot_example(r: dict[str, Any]) -> dspy.Example:
    return make_example("hotpotqa", r["id"], r["question"], answer=r["answer"],
                        supporting_titles=list(r["supporting_titles"]),
                        supporting_facts=[list(x) for x in r.get("supporting_facts", [])],
                        type=r.get("type"), level=r.get("level"))


def split_hotpotqa(dev: list[dict], train: list[dict] | None, sizes: Sequence[int], seed: int) -> FamilySplits:
    """Topic-disjoint splits: no supporting-article title appears in two of train, validation and test
    (`benchmarks.splits.disjoint_split` assigns questions linked by shared titles together). With an official
    train file, validation and test come from dev and train from the train file minus every question sharing a
    title with them. The notes say why any split is smaller than asked: too few rows (sizes scaled
    proportionally) or title conflicts (the groups could not fill every split)."""
    from benchmarks.splits import disjoint_split

    def titles(r: dict) -> list[str]:
        return list(r.get("supporting_titles") or [])

    n_train, n_val, n_test = sizes
    rng = random.Random(f"hotpotqa:{seed}")
    dev = _dedupe(dev)
    notes: list[str] = ["hotpotqa: topic-disjoint splits (no supporting title in two splits)"]
    if train:
        dev_ids = {d["id"] for d in dev}
        train = [r for r in _dedupe(train) if r["id"] not in dev_ids]
        want_val, want_test = scale_sizes((n_val, n_test), len(dev))
        _note_scaling(notes, "hotpotqa", "val/test from dev", (n_val, n_test), (want_val, want_test), len(dev))
        split = disjoint_split(dev, (want_val, want_test), rng, titles)
        notes += [n for n in [split.shortfall("hotpotqa", "val/test from dev")] if n]
        va, te = split.parts
        held = {t for r in va + te for t in titles(r)}
        pool = [r for r in train if not held & set(titles(r))]
        got_train = min(n_train, len(pool))
        if got_train < n_train:
            why = (f"the train file has only {len(train)} rows" if len(train) < n_train else
                   f"of the train file's {len(train)} rows only {len(pool)} share no supporting title with "
                   "validation or test (the others would leak held-out topics into train)")
            notes.append(f"hotpotqa: train wanted {n_train} but got {got_train}: {why}")
        tr = rng.sample(pool, got_train)
    else:
        notes.append("hotpotqa: no train split available; train is carved from the dev rows (disjoint from "
                     "val/test). Paper protocol draws train from the official train split.")
        want = scale_sizes((n_train, n_val, n_test), len(dev))
        _note_scaling(notes, "hotpotqa", "train/val/test", (n_train, n_val, n_test), want, len(dev))
        split = disjoint_split(dev, want, rng, titles)
        notes += [n for n in [split.shortfall("hotpotqa", "train/val/test")] if n]
        tr, va, te = split.parts
    return FamilySplits("hotpotqa", [_hotpot_example(r) for r in tr], [_hotpot_example(r) for r in va],
                        [_hotpot_example(r) for r in te], notes, corpus=split_paragraphs(dev + list(tr)))


def split_paragraphs(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every context paragraph of `records` ({"title", "sentences"}), first occurrence per title."""
    seen: dict[str, dict[str, Any]] = {}
    for r in records:
        for para in r.get("context") or ():
            if isinstance(para, dict):
                title, sentences = para.get("title"), para.get("sentences")
            else:                                   # the official JSON's [title, sentences] pairs
                title, sentences = para
            if title and title not in seen:
                seen[title] = {"title": title, "sentences": list(sentences or ())}
    return list(seen.values())


def _hf_hotpotqa(revision: str | None) -> tuple[list[dict], list[dict]]:
    spec = HF_SOURCES["hotpotqa"]
    ds = _hf_load(spec["path"], spec["name"], None, revision)

    def conv(r, with_context=False):
        sf = r["supporting_facts"]
        facts = [[t, int(s)] for t, s in zip(sf["title"], sf["sent_id"])]
        out = {"id": r["id"], "question": r["question"], "answer": r["answer"], "type": r.get("type"),
               "level": r.get("level"), "supporting_facts": facts,
               "supporting_titles": list(dict.fromkeys(t for t, _ in facts))}
        if with_context:   # the dev split's paragraphs form the offline retrieval corpus (~66k paragraphs)
            ctx = r["context"]
            out["context"] = [{"title": t, "sentences": list(s)} for t, s in zip(ctx["title"], ctx["sentences"])]
        return out

    return [conv(r, True) for r in ds["validation"]], [conv(r) for r in ds["train"]]


def _hf_hotpotqa_train_contexts(revision: str | None, ids: set[str]) -> list[dict]:
    spec = HF_SOURCES["hotpotqa"]
    train = _hf_load(spec["path"], spec["name"], "train", revision).select_columns(["id", "context"])
    return [{"context": [{"title": t, "sentences": list(s)} for t, s in zip(r["context"]["title"],
                                                                           r["context"]["sentences"])]}
            for r in train if r["id"] in ids]


# --------------------------------------------------------------------------- AIME

_AOPS_URL = re.compile(r"(\d{4})_AIME_(I{1,2})_Problems/Problem_(\d+)")


def _aime_key(r: dict) -> tuple[int, str, int]:
    return int(r["year"]), str(r["exam"]), int(r["problem_number"])


def _aime_example(r: dict[str, Any]) -> dspy.Example:
    raw = r["answer"]
    return make_example("aime", r["id"], r["problem"], answer=int(str(raw).strip()), answer_raw=str(raw),
                        solution=r.get("solution"), year=int(r["year"]), exam=str(r["exam"]),
                        problem_number=int(r["problem_number"]), url=r.get("url"))


def split_aime(records: list[dict], sizes: Sequence[int], shuffle_seed: int = AIME_SHUFFLE_SEED) -> FamilySplits:
    n_train, n_val, n_test = sizes
    records = _dedupe(records)
    pool = sorted((r for r in records if int(r["year"]) in AIME_TRAINVAL_YEARS), key=_aime_key)
    test = sorted((r for r in records if int(r["year"]) == AIME_TEST_YEAR), key=_aime_key)
    random.Random(f"aime:{shuffle_seed}").shuffle(pool)
    half = len(pool) // 2
    first, second = pool[:half], pool[half:2 * half]
    notes: list[str] = []
    got = (min(n_train, len(first)), min(n_val, len(second)), min(n_test, len(test)))
    _note_scaling(notes, "aime", "train/val/test", sizes, got, len(pool) + len(test))
    return FamilySplits("aime", [_aime_example(r) for r in first[:got[0]]],
                        [_aime_example(r) for r in second[:got[1]]], [_aime_example(r) for r in test[:got[2]]],
                        notes)


def _hf_aime(revisions: Mapping[str, str | None]) -> list[dict]:
    tv, ts = HF_SOURCES["aime_trainval"], HF_SOURCES["aime_test"]
    out = []
    for r in _hf_load(tv["path"], tv["name"], tv["split"], revisions.get("aime_trainval", tv["revision"])):
        m = _AOPS_URL.search(r["url"])
        if not m:
            raise DataError(f"cannot parse year/exam/problem from AIME url {r['url']!r}")
        year, exam, num = int(m.group(1)), m.group(2), int(m.group(3))
        out.append({"id": f"{year}-{exam}-{num}", "year": year, "exam": exam, "problem_number": num,
                    "problem": r["problem"], "answer": r["answer"], "solution": r.get("solution"), "url": r["url"]})
    for r in _hf_load(ts["path"], ts["name"], ts["split"], revisions.get("aime_test", ts["revision"])):
        idx = int(r["problem_idx"])
        exam, num = ("I", idx) if idx <= 15 else ("II", idx - 15)
        out.append({"id": f"2025-{exam}-{num}", "year": 2025, "exam": exam, "problem_number": num,
                    "problem": r["problem"], "answer": r["answer"], "solution": None, "url": None})
    return out


# --------------------------------------------------------------------------- PUPA

def _pupa_example(r: dict[str, Any]) -> dspy.Example:
    units = r.get("pii_units")
    if isinstance(units, str):
        units = units.split("||")
    units = [u for u in (units or []) if u]
    return make_example("pupa", r["id"], r["user_query"], target_response=r["target_response"], pii_units=units,
                        redacted_query=r.get("redacted_query"), predicted_category=r.get("predicted_category"),
                        conversation_hash=r.get("conversation_hash"))


def split_pupa(rows: list[dict], sizes: Sequence[int]) -> FamilySplits:
    """Positional: rows[0:111] / [111:222] / [222:443] (scaled on fewer rows); first n of each slice."""
    notes: list[str] = []
    pool_size = sum(PUPA_SLICES)
    bounds = scale_sizes(PUPA_SLICES, len(rows))
    _note_scaling(notes, "pupa", f"positional partition of a {pool_size}-row pool", PUPA_SLICES, bounds, len(rows))
    a, b = bounds[0], bounds[0] + bounds[1]
    slices = rows[:a], rows[a:b], rows[b:b + bounds[2]]
    got = tuple(min(n, len(s)) for n, s in zip(sizes, slices))
    if got != tuple(sizes):
        notes.append(f"pupa: first {tuple(sizes)} of the slices requested; slices hold {bounds}, took {got}")
    parts = [[_pupa_example(r) for r in s[:n]] for s, n in zip(slices, got)]
    return FamilySplits("pupa", *parts, notes=notes)


def _hf_pupa(revision: str | None) -> list[dict]:
    spec = HF_SOURCES["pupa"]
    ds = _hf_load(spec["path"], spec["name"], spec["split"], revision)
    return [{"id": f"pupa_new-{i}", **dict(r)} for i, r in enumerate(ds)]


# --------------------------------------------------------------------------- LiveBench-IF

def livebench_article(record: Mapping[str, Any]) -> str:
    """The news article inside `turns[0]` (between the `-------` lines); '' if not found."""
    parts = record["turns"][0].split("-------")
    return parts[1].strip() if len(parts) >= 3 else ""


def _livebench_example(r: dict[str, Any]) -> dspy.Example:
    kwargs = [{k: v for k, v in (kw or {}).items() if v is not None} for kw in r["kwargs"]]
    return make_example("livebench_if", r["question_id"], r["turns"][0], subtask=r["task"],
                        instruction_id_list=list(r["instruction_id_list"]), instruction_kwargs=kwargs,
                        task_prompt=r.get("task_prompt"), release=str(r["livebench_release_date"])[:10],
                        citation=r.get("citation"))


def split_livebench_if(records: list[dict], sizes: Sequence[int], seed: int) -> FamilySplits:
    n_train, n_val, n_test = sizes
    rng = random.Random(f"livebench_if:{seed}")
    records = _dedupe(records, "question_id")
    release = lambda r: str(r.get("livebench_release_date"))[:10]  # noqa: E731
    eval_pool = [r for r in records if release(r) == LIVEBENCH_EVAL_RELEASE]
    fb_pool = [r for r in records if release(r) == LIVEBENCH_FEEDBACK_RELEASE]
    if not eval_pool or not fb_pool:
        raise DataError(f"livebench_if: need rows from releases {LIVEBENCH_FEEDBACK_RELEASE} and "
                        f"{LIVEBENCH_EVAL_RELEASE}; found {len(fb_pool)} and {len(eval_pool)}")
    notes: list[str] = []
    seen_articles = {livebench_article(r) for r in eval_pool} - {""}
    seen_citations = {r.get("citation") for r in eval_pool} - {None, ""}
    kept = [r for r in fb_pool if livebench_article(r) not in seen_articles
            and r.get("citation") not in seen_citations]
    if len(kept) < len(fb_pool):
        notes.append(f"livebench_if: dropped {len(fb_pool) - len(kept)} feedback rows sharing an article with "
                     f"the {LIVEBENCH_EVAL_RELEASE} pool")

    def by_task(pool):
        groups: dict[str, list[dict]] = {}
        for r in pool:
            groups.setdefault(r["task"], []).append(r)
        return {t: rng.sample(g, len(g)) for t, g in sorted(groups.items())}

    fb_groups, ev_groups = by_task(kept), by_task(eval_pool)
    q_train = balanced_quotas(n_train, {t: len(g) for t, g in fb_groups.items()}, rng)
    ev_total = sum(len(g) for g in ev_groups.values())
    got_val, got_test = scale_sizes((n_val, n_test), ev_total)
    _note_scaling(notes, "livebench_if", "val/test", (n_val, n_test), (got_val, got_test), ev_total)
    q_val = balanced_quotas(got_val, {t: len(g) for t, g in ev_groups.items()}, rng)
    q_test = balanced_quotas(got_test, {t: len(g) - q_val[t] for t, g in ev_groups.items()}, rng)
    if sum(q_train.values()) < n_train:
        notes.append(f"livebench_if: train requested {n_train}, only {sum(q_train.values())} available")
    train = [r for t, g in fb_groups.items() for r in g[:q_train[t]]]
    val = [r for t, g in ev_groups.items() for r in g[:q_val[t]]]
    test = [r for t, g in ev_groups.items() for r in g[q_val[t]:q_val[t] + q_test[t]]]
    return FamilySplits("livebench_if", [_livebench_example(r) for r in train],
                        [_livebench_example(r) for r in val], [_livebench_example(r) for r in test], notes)


def _hf_livebench_if(revision: str | None) -> list[dict]:
    spec = HF_SOURCES["livebench_if"]
    ds = _hf_load(spec["path"], spec["name"], spec["split"], revision)
    out = []
    for r in ds:
        r = dict(r)
        r["livebench_release_date"] = str(r.get("livebench_release_date"))[:10]
        out.append(r)
    return out


# --------------------------------------------------------------------------- sources

def _hf_load(path: str, name: str | None, split: str | None, revision: str | None):
    """`datasets.load_dataset` with a clear error when the hub is unreachable."""
    try:
        import datasets
    except ImportError as e:  # pragma: no cover - datasets is a project dependency
        raise DataError("source='hf' needs the `datasets` package: pip install datasets") from e
    try:
        return datasets.load_dataset(path, name, split=split, revision=revision)
    except Exception as e:  # noqa: BLE001 - surface any hub/cache failure with context
        raise DataError(f"could not load Hugging Face dataset {path!r} (config={name!r}, split={split!r}, "
                        f"revision={revision!r}): {e}. Without hub access use source='local' with data_dir=.") from e


def revisions_used(overrides: Mapping[str, str | None] | None = None) -> dict[str, dict[str, Any]]:
    """{source: {"path", "revision"}} a source="hf" load reads (the pins of HF_SOURCES, or `overrides`)."""
    overrides = dict(overrides or {})
    return {key: {"path": spec["path"], "revision": overrides.get(key, spec["revision"])}
            for key, spec in HF_SOURCES.items()}


def load_family(family: str, source: str = "local", data_dir: str | Path | None = None, seed: int = DEFAULT_SEED,
                sizes: Sequence[int] | None = None, revisions: Mapping[str, str | None] | None = None) -> FamilySplits:
    """Load one family's train/val/test splits (see the module docstring for the protocol)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")
    if source not in ("local", "hf"):
        raise ValueError(f"source must be 'local' or 'hf', got {source!r}")
    sizes = tuple(sizes) if sizes is not None else PAPER_SIZES[family]
    if len(sizes) != 3:
        raise ValueError(f"sizes for {family} must be (train, val, test), got {sizes}")
    revisions = dict(revisions or {})
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    if source == "local" and not root.is_dir():
        raise DataError(f"benchmark data directory not found: {root}. Pass data_dir=, set DSPY_ADAPTIVE_BENCH_DATA, "
                        f"or use source='hf'.")
    splits = _load_splits(family, source, root, seed, sizes, revisions)
    _refuse_empty(splits, sizes)
    return splits


def _refuse_empty(splits: FamilySplits, requested: Sequence[int]) -> None:
    """A family with no rows in a split it asked rows for cannot be trained, selected or measured: refuse it."""
    for name, got, want in zip(("train", "validation", "test"), splits.sizes(), requested):
        if want > 0 and got == 0:
            why = "; ".join(n for n in splits.notes if "wanted" in n or "requested" in n) or "no rows available"
            raise SplitError(f"{splits.family}: the {name} split would be empty ({want} requested; train/"
                             f"validation/test came out as {splits.sizes()}): {why}. Ask for sizes the data can "
                             f"hold (--sizes {splits.family}=TRAIN,VAL,TEST) or give the family more rows.")


def _load_splits(family: str, source: str, root: Path, seed: int, sizes: Sequence[int],
                 revisions: Mapping[str, str | None]) -> FamilySplits:
    local = lambda name: _read_jsonl(root / name)  # noqa: E731
    if family == "hotpotqa":
        if source == "hf":
            revision = revisions.get("hotpotqa", HF_SOURCES["hotpotqa"]["revision"])
            dev, train = _hf_hotpotqa(revision)
            splits = split_hotpotqa(dev, train, sizes, seed)
            # the sampled feedback questions' own paragraphs join the dev split's (train contexts are not kept)
            splits.corpus = split_paragraphs(dev + _hf_hotpotqa_train_contexts(
                revision, {ex.source_id for ex in splits.train}))
            return splits
        dev = local(LOCAL_FILES["hotpotqa"])
        train = local(HOTPOTQA_LOCAL_TRAIN) if (root / HOTPOTQA_LOCAL_TRAIN).is_file() else None
        return split_hotpotqa(dev, train, sizes, seed)
    if family == "aime":
        records = _hf_aime(revisions) if source == "hf" else local(LOCAL_FILES["aime"])
        return split_aime(records, sizes)
    if family == "pupa":
        rows = (_hf_pupa(revisions.get("pupa", HF_SOURCES["pupa"]["revision"])) if source == "hf"
                else local(LOCAL_FILES["pupa"]))
        return split_pupa(rows, sizes)
    records = (_hf_livebench_if(revisions.get("livebench_if", HF_SOURCES["livebench_if"]["revision"]))
               if source == "hf" else local(LOCAL_FILES["livebench_if"]))
    return split_livebench_if(records, sizes, seed)


def load_mixture(source: str = "local", data_dir: str | Path | None = None, seed: int = DEFAULT_SEED,
                 sizes: Mapping[str, Sequence[int]] | None = None, families: Sequence[str] = FAMILIES,
                 revisions: Mapping[str, str | None] | None = None) -> Mixture:
    """All families' splits; `sizes` overrides PAPER_SIZES per family, e.g. {"hotpotqa": (10, 10, 20)}."""
    unknown = sorted(set(sizes or {}) - set(FAMILIES)) + sorted(set(families) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown families {unknown}; expected names from {FAMILIES}")
    per = {f: load_family(f, source, data_dir, seed, (sizes or {}).get(f), revisions) for f in families}
    mix = Mixture(train=[e for s in per.values() for e in s.train], val=[e for s in per.values() for e in s.val],
                  test=[e for s in per.values() for e in s.test], families=per, seed=seed, source=source,
                  notes=[n for s in per.values() for n in s.notes])
    ids = [e.id for e in mix.train + mix.val + mix.test]
    if len(ids) != len(set(ids)):  # pragma: no cover - guarded by construction
        raise AssertionError("benchmark splits overlap or ids collide")
    return mix


__all__ = ["AIME_SHUFFLE_SEED", "DEFAULT_SEED", "DataError", "FamilySplits", "HF_SOURCES", "LOCAL_FILES",
           "Mixture", "PAPER_SIZES", "SplitError", "balanced_quotas", "default_data_dir", "example_id",
           "livebench_article", "load_family", "load_mixture", "make_example", "revisions_used", "scale_sizes",
           "split_aime",
           "split_hotpotqa", "split_livebench_if", "split_paragraphs", "split_pupa"]
