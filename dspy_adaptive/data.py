"""Datasets as the search sees them: rows with stable string ids, inputs and hidden labels.

Rows are matched by id everywhere (cache, archive, footprints, resume), never by position. An
example's id is its `id` field when every example has one (they must be unique); otherwise a
content hash of the example, so the same data gives the same ids in every process.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Sequence

import dspy


class InputError(ValueError):
    """Bad optimizer input, raised before any LM call. The message says what to fix."""


@dataclass(frozen=True)
class Row:
    id: str
    example: dspy.Example

    @property
    def inputs(self) -> dict[str, Any]:
        return dict(self.example.inputs())


def _content_id(example: dspy.Example) -> str:
    payload = json.dumps(dict(example.items()), sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def example_id(example: dspy.Example) -> str:
    """An example's id: its `id` field, else a content hash (the same in every process)."""
    return str(example["id"]) if "id" in example else _content_id(example)


def make_rows(examples: Sequence[dspy.Example] | None, name: str) -> tuple[Row, ...]:
    """Validate a train/val set and give each example a stable id."""
    if examples is None:
        raise InputError(f"{name} is None: pass a non-empty list of dspy.Example objects")
    if isinstance(examples, (str, bytes)) or not hasattr(examples, "__len__"):
        raise InputError(f"{name} must be a list of dspy.Example, got {type(examples).__name__}")
    if len(examples) == 0:
        raise InputError(f"{name} is empty: pass at least one dspy.Example")
    for i, ex in enumerate(examples):
        if not isinstance(ex, dspy.Example):
            raise InputError(f"{name}[{i}] is a {type(ex).__name__}, not a dspy.Example")
        if ex._input_keys is None or not ex._input_keys:
            raise InputError(
                f"{name}[{i}] has no input fields: call .with_inputs(...) on every example, "
                f"e.g. dspy.Example(question=..., answer=...).with_inputs('question')")
        missing = [k for k in ex._input_keys if k not in ex]
        if missing:
            raise InputError(f"{name}[{i}] declares inputs {missing} that it does not contain")
    keys = {tuple(sorted(ex._input_keys)) for ex in examples}
    if len(keys) > 1:
        raise InputError(f"{name} mixes input keys {sorted(keys)}: every example must declare the same inputs")
    if all("id" in ex for ex in examples):
        ids = [str(ex["id"]) for ex in examples]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise InputError(f"{name} has duplicate example ids {dupes[:5]}: ids must be unique within a set")
        if any("id" in ex._input_keys for ex in examples):
            raise InputError(f"{name}: 'id' must not be an input field (ids are bookkeeping, never model input)")
        return tuple(Row(i, ex) for i, ex in zip(ids, examples))
    rows, seen = [], {}
    for ex in examples:
        base = _content_id(ex)
        seen[base] = seen.get(base, 0) + 1
        rows.append(Row(base if seen[base] == 1 else f"{base}-{seen[base]}", ex))
    return tuple(rows)


def input_keys(rows: Sequence[Row]) -> tuple[str, ...]:
    return tuple(rows[0].example._input_keys)
