"""The merge proposer: pair -> align -> inherit -> gate check, returned as a `MergeProposal`.

The math lives in the pure modules of this package; this one wires it to an archive, GEPA-style
(gepa.proposer.merge.MergeProposer): choose a pair among the Pareto-front dominators, build the
aligned child, and score it on up to five validation rows both parents were scored on (through the
`check` callable the engine passes, which charges them as `merge_check`). The proposer never
validates, archives or records: the engine accepts a proposal that passes the gate, validates it,
applies `cleaned` (the post-merge cleanup) and archives it. A merge that finds no eligible pair builds
nothing and costs nothing.

The archive is read through a small duck-typed view (`candidates` with index, parents, library,
val_mean, scores, executed; `row_ids`; `pareto_fronts()`), so this package never imports the search.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from gepa.gepa_utils import find_dominator_programs

from dspy_adaptive.library import Library
from dspy_adaptive.merge.align import Alignment, align
from dspy_adaptive.merge.classify import classify_child
from dspy_adaptive.merge.cleanup import cleanup
from dspy_adaptive.merge.footprints import footprints
from dspy_adaptive.merge.gate import gate_passes, select_gate_rows
from dspy_adaptive.merge.inherit import ParentView, merge
from dspy_adaptive.merge.lineage import LineageNode, MergePair, find_merge_pair, has_desirable_component
from dspy_adaptive.records import RowResult

#: Scores a library on validation rows (by id) as a merge check; returns results in row order.
MergeCheck = Callable[[Library, Sequence[str]], Sequence[RowResult]]


@dataclass(frozen=True)
class MergeState:
    """Merge bookkeeping kept in the search state: merges tried so far and accepted reflective proposals
    since the last one (merges run every `merge_cadence` accepted proposals)."""

    invocations: int = 0
    accepted_since: int = 0
    tried: tuple[tuple[int, int], ...] = ()

    def due(self, max_invocations: int | None, cadence: int) -> bool:
        """A merge is due after `cadence` accepted reflective proposals, while fewer than `max_invocations`
        merges were proposed (None: no limit)."""
        below = max_invocations is None or self.invocations < max_invocations
        return below and self.accepted_since >= cadence

    def started(self, parents: tuple[int, int]) -> "MergeState":
        """A merge of `parents` was proposed (whatever its fate, the pair is not tried again)."""
        return MergeState(self.invocations + 1, 0, self.tried + (tuple(sorted(parents)),))

    def accepted_reflection(self) -> "MergeState":
        return replace(self, accepted_since=self.accepted_since + 1)

    def to_dict(self) -> dict[str, Any]:
        return {"invocations": self.invocations, "accepted_since": self.accepted_since,
                "tried": [list(t) for t in self.tried]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MergeState":
        return cls(int(d["invocations"]), int(d["accepted_since"]), tuple(tuple(t) for t in d["tried"]))


@dataclass(frozen=True)
class MergeProposal:
    """A merged child and its gate check; `passed` says whether the engine should validate it."""

    child: Library
    pair: MergePair
    parents: tuple[int, int]          # the two parents, lower index first
    parent_libraries: tuple[Library, Library]
    gate_rows: tuple[str, ...]
    child_sum: float
    parent_sums: tuple[float, float]  # in `parents` order
    details: dict[str, Any]

    @property
    def passed(self) -> bool:
        return gate_passes(self.child_sum, *self.parent_sums)


class MergeProposer:
    def __init__(self, alignment: str = "mutual_best", gate_rows: int = 5):
        self.alignment = alignment
        self.gate_rows = gate_rows

    def propose(self, archive: Any, state: MergeState, rng: random.Random, check: MergeCheck) -> MergeProposal | None:
        """Draw an eligible pair not tried yet, merge it and run the gate check; None if no pair exists."""
        nodes = [LineageNode(c.index, c.parents, c.library, c.val_mean) for c in archive.candidates]
        frontier = sorted(find_dominator_programs(archive.pareto_fronts(), [c.val_mean for c in archive.candidates]))
        tried = {frozenset(t) for t in state.tried}
        pair = find_merge_pair(nodes, rng, tried, candidates=frontier,                              # pair
                               component_check=lambda c, x, y: self._desirable_after_alignment(archive, c, x, y))
        if pair is None:
            return None
        base, other, anc = archive[pair.base], archive[pair.other], archive[pair.ancestor]
        a, b = sorted((base, other), key=lambda c: c.index)
        views = [ParentView(c.library, c.val_mean, footprints(c.library, c.executed, archive.row_ids), c.scores)
                 for c in (base, other)]
        result = merge(anc.library, views[0], views[1], alignment=self.alignment, rng=rng)            # align, inherit
        gate_ids = select_gate_rows(a.scores, b.scores, rng, n=self.gate_rows)                       # gate
        child_sum = float(sum(r.score for r in check(result.child, gate_ids)))
        sum_a, sum_b = sum(a.scores[i] for i in gate_ids), sum(b.scores[i] for i in gate_ids)
        details: dict[str, Any] = {
            "ancestor": anc.index, "base": base.index, "other": other.index, "method": result.method,
            "merge": result.to_dict(), "gate_rows": list(gate_ids),
            "gate_sums": {"child": child_sum, str(a.index): sum_a, str(b.index): sum_b},
        }
        return MergeProposal(result.child, pair, (a.index, b.index), (a.library, b.library), gate_ids, child_sum,
                             (sum_a, sum_b), details)

    @staticmethod
    def cleaned(proposal: MergeProposal, validation: Sequence[RowResult]) -> tuple[Library, dict[str, Any]]:
        """After the child's full validation: deactivate the specialists the router never selected (paper A.2).
        Returns the library to archive and the record's details (the archived scores stay the measured,
        pre-cleanup ones)."""
        library, changed = cleanup(proposal.child, {r.row_id: r.selected for r in validation})
        details = dict(proposal.details, cleanup_deactivated=list(changed), measured_hash=proposal.child.content_hash,
                       classification=classify_child(library, *proposal.parent_libraries))
        return library, details

    def _desirable_after_alignment(self, archive: Any, anc: LineageNode, x: LineageNode, y: LineageNode) -> bool:
        """GEPA's eligibility check ("some component differs and matches the ancestor in one parent"),
        applied after aligning the weaker parent to the base layout, as the paper specifies: two branches
        that grew different roles in the same slot index are mergeable."""
        base, other = (x, y) if (x.val_mean, -x.index) >= (y.val_mean, -y.index) else (y, x)
        fb = footprints(base.library, archive[base.index].executed, archive.row_ids)
        fo = footprints(other.library, archive[other.index].executed, archive.row_ids)
        if fb is None or fo is None:
            return has_desirable_component(anc.library, x.library, y.library)
        al = align(fb, fo, max_specialists=base.library.max_specialists, base_active=base.library.active_ids(),
                   other_active=other.library.active_ids(), method=self.alignment)
        return has_desirable_component(anc.library, base.library, aligned_view(anc.library, other.library, al))


def aligned_view(ancestor: Library, other: Library, alignment: Alignment) -> Library:
    """The other parent re-indexed to the base layout: its aligned specialists at their target slots,
    the ancestor's unit everywhere else (so unassigned slots read as "unchanged")."""
    view = ancestor.with_router(other.router)
    for j, t in alignment.mapping.items():
        view = view.with_slot(t, other.slot(j))
    return view
