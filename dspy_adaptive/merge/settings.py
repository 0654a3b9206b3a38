"""When and how merges run, validated next to the choices it checks against; builds the merge proposer."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dspy_adaptive import checks
from dspy_adaptive.merge.proposer import MERGE_CAP_COUNTS, PARENT_COPY_POLICIES, MergeProposer, MergeState

#: How a merge aligns the weaker parent's specialists: "mutual_best" (the paper) or "hungarian".
ALIGNMENTS = ("mutual_best", "hungarian")


@dataclass(frozen=True)
class MergeSettings:
    """dspy.GEPA's `use_merge` / `max_merge_invocations` and Adaptive-GEPA's merge choices.

    Args:
        enabled (use_merge): propose merges of two branches that share an ancestor (footprint-aligned).
        max_invocations (max_merge_invocations): the merge cap: most merges accepted in a run (as dspy.GEPA
            counts it), or attempted with `cap_counts="attempts"`; None: no limit.
        cadence (merge_cadence): a merge is due after this many accepted reflective proposals since the last
            merge attempt and is tried at the next iteration (1, the default: after every accepted reflective
            proposal, as gepa and the paper's run schedule merges); an iteration without an eligible pair runs a
            reflective proposal instead and the merge stays due.
        cap_counts (merge_cap_counts): "accepted" (merges that passed their check and entered the archive; gepa
            0.1.4 and the paper) or "attempts" (every merge checked).
        parent_copies (merge_parent_copies): a merged child identical to one of its parents: "measure" (the
            paper: checked, charged, and validated and archived if it passes, counting as any merge) or "skip"
            (dropped before its check: no scored call, not an attempt, recorded with failure "merge_copy").
        alignment: how a merge aligns the weaker parent's specialists: "mutual_best" (the paper) or "hungarian"
            (maximum-weight assignment over footprint overlap).
    """

    enabled: bool = True
    max_invocations: int | None = 5
    cadence: int = 1
    cap_counts: str = "accepted"
    parent_copies: str = "measure"
    alignment: str = "mutual_best"

    def __post_init__(self) -> None:
        checks.integer("max_merge_invocations", self.max_invocations, minimum=0, optional=True,
                       none_means="no limit")
        checks.integer("merge_cadence", self.cadence)
        checks.one_of("merge_cap_counts", self.cap_counts, MERGE_CAP_COUNTS)
        checks.one_of("merge_parent_copies", self.parent_copies, PARENT_COPY_POLICIES)
        checks.one_of("alignment", self.alignment, ALIGNMENTS)

    def due(self, state: MergeState) -> bool:
        """A merge is due now (enabled, the cadence reached, the cap not)."""
        return self.enabled and state.due(self.max_invocations, self.cadence, self.cap_counts)

    def proposer(self) -> MergeProposer | None:
        return MergeProposer(alignment=self.alignment, parent_copies=self.parent_copies) if self.enabled else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
