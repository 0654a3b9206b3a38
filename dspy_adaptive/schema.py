"""The lowest layer: what a run records, as plain frozen data with typed kinds.

* `RowResult`: one scored call (one program run on one example plus its metric).
* `ProposalRecord`: one proposal and its fate (the unit of the run record).
* Typed vocabularies: `ProposalKind`, `ActionName`, `FailureKind` (why a proposal was not accepted) and
  `BudgetKind`. Reports count by these fields, never by the wording of a message: every `reason` is
  for people (and for reflection) only.
* Small shared helpers: `clip` (long values shown to people or models), `slot_label`, `ancestors`.

What one row may write is bounded here, whatever wrote it (a specialist's names, keys and texts are
hostile; the sandbox already caps them, and this layer holds its own caps anyway). A `RowResult` keeps
names and keys of at most `MAX_KEY_CHARS` characters (cut with a marker, plain characters only), clipped
texts, at most `MAX_OUTPUT_FIELDS` output fields and `MAX_STEP_FIELDS` inputs and outputs per step, and
the first `MAX_STEPS` steps (the rest counted in `steps_omitted`); and the whole row, as JSON the way
evals.jsonl, the cache file and run.json write it, fits `MAX_ROW_BYTES` (output fields, then steps, are
dropped, and counted, past it). A `ProposalRecord` clips its reason and every text in its details.

Everything here imports only the standard library, so every other module may import it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Mapping, Sequence, get_args

MAX_FIELD_CHARS = 2000          # one output value / one proposal reason
MAX_STEP_VALUE_CHARS = 800      # one input or output value of a step
MAX_STEPS = 50                  # steps kept per row (the first ones); the rest are counted
MAX_STEP_FIELDS = 24            # inputs (and outputs) kept per step: the sandbox's signature cap
MAX_OUTPUT_FIELDS = 32          # output fields kept per row
MAX_KEY_CHARS = 64              # a field name or key
MAX_LABEL_CHARS = 120           # a predictor label ("slot2.<attribute path>")
MAX_FEEDBACK_CHARS = 16000      # metric feedback (AIME's carries a worked solution: up to ~14k characters)
MAX_NOTE_CHARS = 2000           # errors, fallback reasons, metric notes
MAX_ROW_BYTES = 256_000         # one whole row as written (JSON, non-ASCII escaped)
MAX_DETAIL_CHARS = 6000         # one text in a proposal's details (e.g. a rejected source)

#: What a proposal was: a reflective edit, a merge, a skipped iteration (parent perfect on its
#: minibatch), or a concurrent proposal stopped because its parent was pushed out while it ran.
ProposalKind = Literal["reflect", "merge", "skip", "stale"]
PROPOSAL_KINDS: tuple[str, ...] = get_args(ProposalKind)

#: The reflection actions (paper Table 6). Merges are recorded with action "merge".
ActionName = Literal["activate", "rewrite_program", "rewrite_description", "rewrite_router", "deactivate"]
ACTIONS: tuple[str, ...] = get_args(ActionName)

#: Why a proposal did not enter the archive (None when it did).
FailureKind = Literal[
    "perfect",            # skip: the parent scored perfectly on the whole minibatch (no reflection)
    "stale",              # concurrent proposals: the parent left what the selector could pick
    "selection_failed",   # the action-selection LM call raised
    "unknown_action",     # the selected action is not one of ACTIONS
    "invalid_target",     # the action's target slot does not exist or is in the wrong state
    "edit_failed",        # the edit's LM call raised
    "bad_output",         # the edit's answer was unusable (empty text, bad profile, ...)
    "unparseable",        # the reflection answer could not be parsed into the call's fields
    "truncated",          # the reflection answer stopped at its token limit (never adopted)
    "sandbox_rejected",   # the new program failed the sandbox policy or did not compile
    "no_change",          # the edit produced a library identical to its parent
    "gate",               # the child did not strictly beat its parent on the minibatch
    "merge_gate",         # the merged child scored below the stronger parent on the gate rows
    "merge_copy",         # the merged child was identical to a parent and dropped unchecked
]
FAILURE_KINDS: tuple[str, ...] = get_args(FailureKind)
#: Failures where the reflection LM call itself raised (counted as "failed reflections").
REFLECTION_ERRORS = frozenset({"selection_failed", "edit_failed"})

#: What a scored call was charged to.
BudgetKind = Literal["seed_validation", "parent_minibatch", "child_minibatch", "validation", "merge_check"]
BUDGET_KINDS: tuple[str, ...] = get_args(BudgetKind)

FALLBACK = 0

_KEY_CHARS = re.compile(r"[^A-Za-z0-9_.:+\[\]'\"-]")


def bounded_key(key: object, limit: int = 64) -> str:
    """A name or key for logs and records: plain characters only (others become `?`), at most `limit`
    characters (a longer one is cut and ends with a marker saying how many were cut). Bounding a bounded
    key changes nothing."""
    text = _KEY_CHARS.sub("?", key if isinstance(key, str) else repr(key))
    if len(text) <= limit:
        return text
    cut = max(0, limit - len(f"...[+{len(text)}]"))
    return text[:cut] + f"...[+{len(text) - cut}]"


def clip(value: Any, limit: int = MAX_FIELD_CHARS) -> str:
    """`value` as text (repr for non-strings), at most `limit` characters: a longer one is cut and ends with
    a note of how many characters were cut. Clipping clipped text changes nothing."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    cut = limit - len(f"... [{len(text)} more chars]")
    return text[:max(0, cut)] + f"... [{len(text) - max(0, cut)} more chars]"


#: The marker a value shortened from its middle carries where characters were left out.
LEFT_OUT = "[... {n} characters left out ...]"


def clip_middle(value: Any, limit: int) -> str:
    """`value` as text, at most `limit` characters: a longer one keeps its beginning and its end with a marker
    of how many characters were left out between them (a worked solution's conclusion is at its end)."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    room = max(0, limit - len(LEFT_OUT.format(n=len(text))) - 2)
    head, tail = room - room // 2, room // 2
    return text[:head] + "\n" + LEFT_OUT.format(n=len(text) - head - tail) + "\n" + text[len(text) - tail:]


def _clip_opt(value: Any, limit: int) -> str | None:
    return None if value is None else clip(value, limit)


def _json_len(value: Any) -> int:
    return len(json.dumps(value, default=str))


def _bounded_value(value: Any, chars: int) -> Any:
    """Text clipped to `chars`; a number, bool or None as it is; a list or dict as it is when its JSON fits in
    `chars` (track_best_outputs keeps JSON values), else its clipped text."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (list, dict)):
        try:
            if _json_len(value) <= chars:
                return value
        except (TypeError, ValueError):
            pass
    return clip(value, chars)


def bound_fields(fields: Any, max_fields: int, value_chars: int) -> dict[str, Any]:
    """At most `max_fields` (key, value) pairs of a mapping, keys bounded, values clipped text; more fields
    are noted under a "..." key with their count."""
    items = list(fields.items()) if isinstance(fields, Mapping) else [("output", fields)]
    out = {bounded_key(k, MAX_KEY_CHARS): _bounded_value(v, value_chars) for k, v in items[:max_fields]}
    if len(items) > max_fields:
        out["..."] = f"{len(items) - max_fields} more fields not recorded"
    return out


def bound_step(step: Mapping[str, Any]) -> dict[str, Any]:
    """One predictor step with a bounded label, at most MAX_STEP_FIELDS inputs and outputs, clipped values."""
    return {"predictor": bounded_key(step.get("predictor", "?"), MAX_LABEL_CHARS),
            "inputs": bound_fields(step.get("inputs") or {}, MAX_STEP_FIELDS, MAX_STEP_VALUE_CHARS),
            "outputs": bound_fields(step.get("outputs") or {}, MAX_STEP_FIELDS, MAX_STEP_VALUE_CHARS)}


def bound_steps(steps: Sequence[Mapping[str, Any]], budget: int = MAX_ROW_BYTES) -> tuple[tuple[dict, ...], int]:
    """(the first bounded steps that fit MAX_STEPS and `budget` bytes of JSON; how many were left out)."""
    kept: list[dict[str, Any]] = []
    for step in steps[:MAX_STEPS]:
        b = bound_step(step)
        budget -= _json_len(b) + 2
        if budget < 0:
            break
        kept.append(b)
    return tuple(kept), len(steps) - len(kept)


def _fit_output(output: dict[str, str], budget: int) -> tuple[dict[str, str], int]:
    """The output fields, in order, that fit `budget` bytes of JSON (a "..." note counts the rest)."""
    kept: dict[str, str] = {}
    items = list(output.items())
    for i, (k, v) in enumerate(items):
        budget -= _json_len({k: v})
        if budget < 200:
            kept["..."] = f"{len(items) - i} more fields not recorded (row size limit)"
            return kept, budget
        kept[k] = v
    return kept, budget


def bound_details(value: Any, depth: int = 0) -> Any:
    """A proposal's details with every text clipped to MAX_DETAIL_CHARS and every key bounded (numbers,
    booleans and the shape of lists and mappings are kept: merge replays read them)."""
    if isinstance(value, str):
        return clip(value, MAX_DETAIL_CHARS)
    if depth > 8:
        return clip(repr(value), 200)
    if isinstance(value, Mapping):
        return {bounded_key(k, MAX_KEY_CHARS) if isinstance(k, str) else k: bound_details(v, depth + 1)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(bound_details(v, depth + 1) for v in value)
    return value


def slot_label(slot: int | None) -> str:
    """How people read a slot id: "fallback" (0), "slot k", or "unknown" (None: no route recorded)."""
    return "fallback" if slot == FALLBACK else "unknown" if slot is None else f"slot {slot}"


def ancestors(parents: Mapping[int, Sequence[int]] | Sequence[Sequence[int]], index: int) -> frozenset[int]:
    """Every strict ancestor of `index`, given each candidate's parents (a mapping, or a list indexed by
    candidate). Parents missing from `parents` count as ancestors but are not walked further."""
    lookup = parents if isinstance(parents, Mapping) else dict(enumerate(parents))
    seen: set[int] = set()
    stack = [int(p) for p in lookup[index]]
    while stack:
        p = stack.pop()
        if p not in seen:
            seen.add(p)
            stack.extend(int(q) for q in lookup.get(p, ()))
    return frozenset(seen)


@dataclass(frozen=True)
class RowResult:
    """Everything the search keeps about one scored call."""

    row_id: str
    score: float
    feedback: str
    output: dict[str, str] | None
    selected: int | None
    executed: int | None          # None: the route is unknown (the call failed before routing)
    fallback_reason: str | None
    error: str | None             # runtime failure (scored failure_score without calling the metric)
    steps: tuple[dict[str, Any], ...]
    metric_note: str | None = None  # the metric misbehaved (None/NaN/str...): recorded, scored as failure
    error_kind: str | None = None   # a failed specialist's SpecialistError kind, else the exception class
    objective_scores: dict[str, float] | None = None   # the metric's objective_scores (multi-objective), if any
    steps_omitted: int = 0          # steps past MAX_STEPS / MAX_STEPS_CHARS, counted but not recorded

    def __post_init__(self) -> None:
        """Every row is bounded, whoever built it (see the module docstring): texts first, then output
        fields, then steps, each within what is left of MAX_ROW_BYTES."""
        texts = {"feedback": clip_middle(self.feedback, MAX_FEEDBACK_CHARS),
                 "error": _clip_opt(self.error, MAX_NOTE_CHARS),
                 "metric_note": _clip_opt(self.metric_note, MAX_NOTE_CHARS),
                 "fallback_reason": _clip_opt(self.fallback_reason, MAX_NOTE_CHARS),
                 "error_kind": None if self.error_kind is None else bounded_key(self.error_kind, MAX_KEY_CHARS)}
        budget = MAX_ROW_BYTES - _json_len(texts) - _json_len(self.row_id) - 400   # 400: the other fields, keys
        output = None
        if self.output is not None:
            output, budget = _fit_output(bound_fields(self.output, MAX_OUTPUT_FIELDS, MAX_FIELD_CHARS), budget)
        steps, omitted = bound_steps(tuple(self.steps), budget)
        objectives = None
        if self.objective_scores is not None:
            items = list(self.objective_scores.items())[:MAX_OUTPUT_FIELDS]
            objectives = {bounded_key(k, MAX_KEY_CHARS): v for k, v in items}
        for name, value in {**texts, "output": output, "steps": steps, "objective_scores": objectives,
                            "steps_omitted": int(self.steps_omitted) + omitted}.items():
            object.__setattr__(self, name, value)

    @property
    def router_unparsed(self) -> bool:
        """The router's answer was not a slot number, so the request went to the fallback."""
        return self.executed == FALLBACK and self.selected is None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["steps"] = list(self.steps)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RowResult":
        d = dict(d)
        d["steps"] = tuple(d.get("steps") or ())
        return cls(**d)


@dataclass(frozen=True)
class ProposalRecord:
    """One proposal and its fate (the run record's unit)."""

    iteration: int
    kind: ProposalKind
    parents: tuple[int, ...]
    action: ActionName | Literal["merge"] | None
    slot: int | None
    minibatch: tuple[str, ...]
    parent_sum: float | None
    child_sum: float | None
    accepted: bool
    reason: str | None              # for people and for reflection; never parsed
    child_index: int | None
    child_hash: str | None
    budget_at: int
    details: dict[str, Any] = field(default_factory=dict)
    failure: FailureKind | None = None
    usage: dict[str, dict[str, float]] = field(default_factory=dict)   # LM calls/tokens/USD per role it spent

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", _clip_opt(self.reason, MAX_FIELD_CHARS))
        object.__setattr__(self, "details", bound_details(dict(self.details or {})))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["parents"], d["minibatch"] = list(self.parents), list(self.minibatch)
        return d

    @property
    def cost(self) -> float:
        """USD this proposal spent on LM calls, every role."""
        return sum(float(v.get("cost", 0.0)) for v in self.usage.values())

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProposalRecord":
        d = dict(d)
        d["parents"], d["minibatch"] = tuple(d["parents"]), tuple(d["minibatch"])
        return cls(**d)


__all__ = ["ACTIONS", "BUDGET_KINDS", "FAILURE_KINDS", "PROPOSAL_KINDS", "REFLECTION_ERRORS", "ActionName",
           "BudgetKind", "FailureKind", "ProposalKind", "ProposalRecord", "RowResult", "ancestors", "bound_details",
           "bound_fields", "bound_step", "bound_steps", "bounded_key", "clip", "slot_label"]
