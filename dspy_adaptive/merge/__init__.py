"""Merge math for Adaptive-GEPA (paper §3.3, Appendix A.1-A.2, H): pure functions, no I/O, no LM.

footprints -> jaccard_matrix -> align -> merge (or index_merge) -> gate -> cleanup -> classify_child.
`merge.proposer.MergeProposer` wires them to an archive and returns a `MergeProposal` (the search engine
validates, archives and records it).

Provenance reasons (SlotProvenance.reason):
  aligned mode: "identical", "changed_in_base_only", "changed_in_other_only", "unchanged_in_both",
                "conflict_scores", "one_sided_traffic", "aggregate_rule", "placed",
                "base_unmatched" (active base specialist without a partner), "base_layout" (unassigned slot)
  index mode:   "unchanged" (source "ancestor"), "same_in_both", "changed_in_base_only",
                "changed_in_other_only", "aggregate_rule"
"""

from dspy_adaptive.merge.align import METHODS, Alignment, align
from dspy_adaptive.merge.classify import CLASSES, classify_child
from dspy_adaptive.merge.cleanup import cleanup
from dspy_adaptive.merge.footprints import (
    JaccardMatrix,
    footprints,
    jaccard,
    jaccard_matrix,
    selected_slots,
    unknown_rows,
)
from dspy_adaptive.merge.gate import gate_passes, select_gate_rows
from dspy_adaptive.merge.inherit import (
    ANCESTOR_FRAMES,
    Decision,
    MergeResult,
    ParentView,
    RouterProvenance,
    SlotProvenance,
    aggregate_rule,
    decide_pair,
    index_merge,
    merge,
    resolve_conflict,
)
from dspy_adaptive.merge.lineage import (
    LineageNode,
    MergePair,
    components,
    eligible_pairs,
    find_merge_pair,
    has_desirable_component,
)

__all__ = [
    "ANCESTOR_FRAMES", "CLASSES", "METHODS", "Alignment", "Decision", "JaccardMatrix", "LineageNode",
    "MergePair", "MergeResult", "ParentView", "RouterProvenance", "SlotProvenance", "aggregate_rule",
    "align", "classify_child", "cleanup", "components", "decide_pair", "eligible_pairs",
    "find_merge_pair", "footprints", "unknown_rows", "gate_passes", "has_desirable_component", "index_merge",
    "jaccard", "jaccard_matrix", "merge", "resolve_conflict", "select_gate_rows", "selected_slots",
]
