"""A built-in mini mixture of four task families, written for this project (see data/README.md).

`load_demo_mixture()` returns `(train, val, test)`: lists of `dspy.Example` whose only input is
`request`; `family`, `subtask`, `split` and the gold fields ride along as labels. The order is
deterministic (families interleaved), so runs are reproducible.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Iterable

import dspy

from dspy_adaptive.tasks import FAMILIES

__all__ = ["FAMILIES", "SPLITS", "demo_corpus_path", "load_demo_corpus", "load_demo_mixture", "load_family"]

SPLITS = ("train", "val", "test")


def _data_dir() -> Path:
    return Path(str(resources.files("dspy_adaptive.demo") / "data"))


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def demo_corpus_path() -> str:
    """Path of `corpus.jsonl`: {"title", "sentences"} rows the multi-hop questions are answered from."""
    return str(_data_dir() / "corpus.jsonl")


def load_demo_corpus() -> list[dict]:
    return _read_jsonl(Path(demo_corpus_path()))


def load_family(family: str) -> list[dict]:
    """Raw rows of one family, in file order."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")
    return _read_jsonl(_data_dir() / f"{family}.jsonl")


def _to_example(row: dict) -> dspy.Example:
    return dspy.Example(**row).with_inputs("request")


def _interleave(groups: Iterable[list[dict]]) -> list[dict]:
    groups = [list(g) for g in groups]
    out = []
    for i in range(max((len(g) for g in groups), default=0)):
        out.extend(g[i] for g in groups if i < len(g))
    return out


Split = list[dspy.Example]


def load_demo_mixture(families: Iterable[str] = FAMILIES) -> tuple[Split, Split, Split]:
    """(train, val, test) lists of `dspy.Example(...).with_inputs("request")`, families interleaved."""
    rows = {f: load_family(f) for f in families}
    splits = []
    for split in SPLITS:
        per_family = [[r for r in rows[f] if r["split"] == split] for f in rows]
        splits.append([_to_example(r) for r in _interleave(per_family)])
    return tuple(splits)  # type: ignore[return-value]
