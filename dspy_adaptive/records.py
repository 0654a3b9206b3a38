"""The lowest layer: what a run records, as plain frozen data with typed kinds.

* `RowResult`: one scored call (one program run on one example plus its metric).
* `ProposalRecord`: one proposal and its fate (the unit of the run record).
* Typed vocabularies: `ProposalKind`, `ActionName`, `FailureKind` (why a proposal was not accepted) and
  `BudgetKind`. Reports count by these fields, never by the wording of a message: every `reason` is
  for people (and for reflection) only.
* Small shared helpers: `clip` (long values shown to people or models), `slot_label`, `ancestors`.

Everything here imports only the standard library, so every other module may import it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Mapping, Sequence, get_args

MAX_FIELD_CHARS = 2000

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
    "sandbox_rejected",   # the new program failed the sandbox policy or did not compile
    "no_change",          # the edit produced a library identical to its parent
    "gate",               # the child did not strictly beat its parent on the minibatch
    "merge_gate",         # the merged child scored below the stronger parent on the gate rows
]
FAILURE_KINDS: tuple[str, ...] = get_args(FailureKind)
#: Failures where the reflection LM call itself raised (counted as "failed reflections").
REFLECTION_ERRORS = frozenset({"selection_failed", "edit_failed"})

#: What a scored call was charged to.
BudgetKind = Literal["seed_validation", "parent_minibatch", "child_minibatch", "validation", "merge_check"]
BUDGET_KINDS: tuple[str, ...] = get_args(BudgetKind)

FALLBACK = 0


def clip(value: Any, limit: int = MAX_FIELD_CHARS) -> str:
    """`value` as text (repr for non-strings), cut to `limit` characters with a note of what was cut."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


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
           "BudgetKind", "FailureKind", "ProposalKind", "ProposalRecord", "RowResult", "ancestors", "clip",
           "slot_label"]
