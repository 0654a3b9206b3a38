"""The merge proposer: pair -> align -> inherit -> gate check, returned as a `MergeProposal`.

The math lives in the pure modules of this package; this one wires it to an archive, GEPA-style
(gepa.proposer.merge.MergeProposer): choose a pair among the Pareto-front dominators, build the
aligned child, and score it on up to five validation rows both parents were scored on (through the
`check` callable the engine passes, which charges them as `merge_check`). The proposer never
validates, archives or records: the engine accepts a proposal that passes the gate, validates it,
applies `cleaned` (the post-merge cleanup) and archives it. A merge that finds no eligible pair builds
nothing and costs nothing.

The archive is read through a small duck-typed view (`candidates` with index, parents, library,
val_mean, scores, executed; `row_ids`; `frontier()`, gepa's frontier of the run's `frontier_type`), so this
package never imports the search.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from gepa.gepa_utils import find_dominator_programs

from dspy_adaptive.merge.align import Alignment, align
from dspy_adaptive.merge.classify import classify_child
from dspy_adaptive.merge.cleanup import cleanup
from dspy_adaptive.merge.footprints import footprints, unknown_rows
from dspy_adaptive.merge.gate import gate_passes, select_gate_rows
from dspy_adaptive.merge.inherit import ParentView, merge
from dspy_adaptive.merge.lineage import LineageNode, MergePair, find_merge_pair, has_desirable_component
from dspy_adaptive.program.library import Library
from dspy_adaptive.schema import RowResult

#: Scores a library on validation rows (by id) as a merge check; returns results in row order.
MergeCheck = Callable[[Library, Sequence[str]], Sequence[RowResult]]


#: What `max_merge_invocations` counts: merges that passed their check and entered the archive
#: ("accepted", as gepa 0.1.4 / dspy.GEPA count them and as the paper's run did) or every merge attempted
#: (a pair found, merged and checked: "attempts").
MERGE_CAP_COUNTS = ("accepted", "attempts")


@dataclass(frozen=True)
class MergeState:
    """Merge bookkeeping kept in the search state.

    `invocations`: merges attempted (a pair was found, merged and the child checked); `accepted`: those
    that passed the check and were validated and archived; `accepted_since`: accepted reflective
    proposals since the last attempt (a merge is due every `merge_cadence` of them); `tried`: pairs
    proposed so far (never proposed again); `copies_skipped`: merged children identical to a parent that
    were dropped before their check (`merge_parent_copies="skip"`).
    """

    invocations: int = 0
    accepted_since: int = 0
    tried: tuple[tuple[int, int], ...] = ()
    accepted: int = 0
    copies_skipped: int = 0

    def due(self, max_invocations: int | None, cadence: int, counts: str = "accepted") -> bool:
        """A merge is due after `cadence` accepted reflective proposals, while the cap holds: fewer than
        `max_invocations` accepted merges (`counts="accepted"`) or attempts (`counts="attempts"`); None: no
        limit."""
        if counts not in MERGE_CAP_COUNTS:
            raise ValueError(f"counts must be one of {MERGE_CAP_COUNTS}, got {counts!r}")
        used = self.accepted if counts == "accepted" else self.invocations
        return (max_invocations is None or used < max_invocations) and self.accepted_since >= cadence

    def started(self, parents: tuple[int, int]) -> "MergeState":
        """A merge of `parents` was proposed and checked (whatever its fate, the pair is not tried again)."""
        return replace(self, invocations=self.invocations + 1, accepted_since=0,
                       tried=self.tried + (tuple(sorted(parents)),))

    def passed(self) -> "MergeState":
        """The merge just started passed its check and entered the archive."""
        return replace(self, accepted=self.accepted + 1)

    def copy_skipped(self, parents: tuple[int, int]) -> "MergeState":
        """A merge of `parents` built a copy of a parent and was dropped unchecked (not an attempt)."""
        return replace(self, copies_skipped=self.copies_skipped + 1, tried=self.tried + (tuple(sorted(parents)),))

    def accepted_reflection(self) -> "MergeState":
        return replace(self, accepted_since=self.accepted_since + 1)

    def to_dict(self) -> dict[str, Any]:
        return {"invocations": self.invocations, "accepted_since": self.accepted_since,
                "tried": [list(t) for t in self.tried], "accepted": self.accepted,
                "copies_skipped": self.copies_skipped}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MergeState":
        return cls(int(d["invocations"]), int(d["accepted_since"]), tuple(tuple(t) for t in d["tried"]),
                   int(d.get("accepted", 0)), int(d.get("copies_skipped", 0)))


@dataclass(frozen=True)
class MergeProposal:
    """A merged child and its gate check; `passed` says whether the engine should validate it."""

    child: Library
    pair: MergePair
    parents: tuple[int, int]          # the two parents, lower index first
    parent_libraries: tuple[Library, Library]
    gate_rows: tuple[str, ...]
    child_sum: float | None           # None: not checked (a parent copy dropped unchecked)
    parent_sums: tuple[float, float]  # in `parents` order
    details: dict[str, Any]
    parent_copy: int | None = None    # the parent the child is content-identical to, if any

    @property
    def checked(self) -> bool:
        return self.child_sum is not None

    @property
    def passed(self) -> bool:
        return self.child_sum is not None and gate_passes(self.child_sum, *self.parent_sums)


#: What a merge whose child is content-identical to a parent does: "measure" (the paper: it is checked,
#: charged, and validated and archived if it passes, as any merge) or "skip" (dropped before its check:
#: it costs no scored call and does not count as an attempt or against the cap).
PARENT_COPY_POLICIES = ("measure", "skip")


class MergeProposer:
    """Args:
        alignment: "mutual_best" (the paper) or "hungarian".
        gate_rows: validation rows of the merge check (the paper: 5).
        parent_copies: see PARENT_COPY_POLICIES.
    """

    def __init__(self, alignment: str = "mutual_best", gate_rows: int = 5, parent_copies: str = "measure"):
        if parent_copies not in PARENT_COPY_POLICIES:
            raise ValueError(f"parent_copies must be one of {PARENT_COPY_POLICIES}, got {parent_copies!r}")
        self.alignment = alignment
        self.gate_rows = gate_rows
        self.parent_copies = parent_copies

    def propose(self, archive: Any, state: MergeState, rng: random.Random, check: MergeCheck) -> MergeProposal | None:
        """Draw an eligible pair not tried yet, merge it and run the gate check; None if no pair exists."""
        nodes = [LineageNode(c.index, c.parents, c.library, c.val_mean) for c in archive.candidates]
        frontier = sorted(find_dominator_programs(archive.frontier(), [c.val_mean for c in archive.candidates]))
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
        copy_of = next((c.index for c in (a, b) if c.library.content_hash == result.child.content_hash), None)
        details: dict[str, Any] = {
            "ancestor": anc.index, "base": base.index, "other": other.index, "method": result.method,
            "merge": result.to_dict(), "parent_copy": copy_of,
            "unknown_rows": {str(c.index): unknown_rows(c.executed, archive.row_ids) for c in (base, other)},
        }
        if copy_of is not None and self.parent_copies == "skip":
            return MergeProposal(result.child, pair, (a.index, b.index), (a.library, b.library), (), None,
                                 (0.0, 0.0), details, parent_copy=copy_of)
        gate_ids = select_gate_rows(a.scores, b.scores, rng, n=self.gate_rows)                       # gate
        child_sum = float(sum(r.score for r in check(result.child, gate_ids)))
        sum_a, sum_b = sum(a.scores[i] for i in gate_ids), sum(b.scores[i] for i in gate_ids)
        details.update(gate_rows=list(gate_ids), gate_sums={"child": child_sum, str(a.index): sum_a,
                                                            str(b.index): sum_b})
        return MergeProposal(result.child, pair, (a.index, b.index), (a.library, b.library), gate_ids, child_sum,
                             (sum_a, sum_b), details, parent_copy=copy_of)

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
