"""Inheritance: build the merged child from an ancestor and two parents (paper §3.3, Appendix A.2).

Merge components are the router and each slot *unit* (description, program, profile, active), always
copied whole. Two modes:

* aligned (`merge`, footprints of both parents known): base layout = the parent with the higher
  validation mean (the caller passes it as `base`); the other parent's specialists are aligned to it
  (`align`). Router: from the base parent when the other parent's live specialists are re-indexed or
  dropped (its numeric references would be stale); when every one keeps its index
  (`Alignment.preserves_indices`), the router is merged like any component (GEPA's rule: changed in
  one parent only -> take it; changed in both -> aggregate rule), so the other parent's router can win.
* index (`index_merge`, or `merge` when a footprint is missing): GEPA's per-component merge by slot
  index (gepa.proposer.merge.sample_and_attempt_merge_programs_by_common_predictors), router included.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from dspy_adaptive.merge.align import Alignment, align
from dspy_adaptive.merge.footprints import Footprints, JaccardMatrix, jaccard_matrix
from dspy_adaptive.program.library import Library, Slot

ANCESTOR_FRAMES = ("own_index", "target", "any_slot")


@dataclass(frozen=True)
class ParentView:
    """What the merge reads about one parent: its library, archived validation mean, footprints
    (None = missing) and per-row validation scores (row id -> score)."""

    library: Library
    val_mean: float
    footprints: Footprints | None
    row_scores: Mapping[str, float]


@dataclass(frozen=True)
class Decision:
    """Which parent a component came from ("base" | "other") and why, plus conflict evidence."""

    winner: str
    reason: str
    n_shared: int | None = None
    base_score: float | None = None
    other_score: float | None = None


@dataclass(frozen=True)
class SlotProvenance:
    slot: int                  # target slot in the child
    source: str                # "base" | "other" | "ancestor"
    from_slot: int             # slot index in the source library
    reason: str                # see the package docstring (dspy_adaptive.merge)
    pairing: str               # "matched" | "competing" | "placed" | "base_only" | "index"
    other_slot: int | None = None
    n_shared: int | None = None
    base_score: float | None = None
    other_score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RouterProvenance:
    source: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "reason": self.reason}


@dataclass(frozen=True)
class MergeResult:
    child: Library
    slots: tuple[SlotProvenance, ...]
    router: RouterProvenance
    method: str                         # "mutual_best" | "hungarian" | "index"
    alignment: Alignment | None
    jaccard: JaccardMatrix | None
    fallback_reason: str | None = None  # e.g. "footprint_missing" when the index layout was kept

    def provenance(self, slot: int) -> SlotProvenance:
        return self.slots[slot - 1]

    def sources(self) -> dict[int, str]:
        return {p.slot: p.source for p in self.slots}

    def is_parent_copy(self, *parents: Library) -> bool:
        """True if the child is content-identical to one of `parents` (a merge with nothing new)."""
        return any(self.child.content_hash == p.content_hash for p in parents)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "fallback_reason": self.fallback_reason,
                "child_hash": self.child.content_hash, "router": self.router.to_dict(),
                "slots": [p.to_dict() for p in self.slots],
                "alignment": self.alignment.to_dict() if self.alignment else None,
                "jaccard": self.jaccard.to_dict() if self.jaccard else None}


# -- rules ------------------------------------------------------------------------------------------
def aggregate_rule(base: ParentView, other: ParentView, rng: random.Random) -> str:
    """GEPA's aggregate-parent rule: the parent with the higher validation mean; exact tie -> rng."""
    if base.val_mean > other.val_mean:
        return "base"
    if other.val_mean > base.val_mean:
        return "other"
    return rng.choice(["base", "other"])


def resolve_conflict(base: ParentView, other: ParentView, base_slot: int, other_slot: int,
                     rng: random.Random) -> Decision:
    """Both parents changed an aligned pair: decide on evidence (paper A.2 "Conflict scores").

    Both have traffic and share rows -> higher mean archived score on F_i ∩ F_j (only rows scored for
    both parents), ties -> base. Exactly one has traffic -> that one. Otherwise (both silent, disjoint
    traffic, footprints missing, or no scores on the shared rows) -> aggregate rule.
    """
    if base.footprints is None or other.footprints is None:
        return Decision(aggregate_rule(base, other, rng), "aggregate_rule")
    fa = base.footprints.get(base_slot, frozenset())
    fb = other.footprints.get(other_slot, frozenset())
    if fa and fb:
        shared = sorted(r for r in fa & fb if r in base.row_scores and r in other.row_scores)
        if shared:
            sa = sum(base.row_scores[r] for r in shared) / len(shared)
            sb = sum(other.row_scores[r] for r in shared) / len(shared)
            return Decision("other" if sb > sa else "base", "conflict_scores", len(shared), sa, sb)
        return Decision(aggregate_rule(base, other, rng), "aggregate_rule", 0)
    if fa or fb:
        return Decision("base" if fa else "other", "one_sided_traffic")
    return Decision(aggregate_rule(base, other, rng), "aggregate_rule")


def _in_ancestor(unit: Slot, ancestor: Library, own: int, target: int, frame: str) -> bool:
    if frame == "own_index":
        return unit == ancestor.slot(own)
    if frame == "target":
        return unit == ancestor.slot(target)
    return unit in ancestor.slots  # "any_slot": content equality anywhere in the ancestor


def decide_pair(ancestor: Library, base: ParentView, other: ParentView, base_slot: int, other_slot: int,
                rng: random.Random, *, ancestor_frame: str = "own_index", competing: bool = False) -> Decision:
    """Which unit an aligned pair (base slot i, other slot j -> target i) inherits.

    Identical units -> base. A competing pair (capacity fallback) goes straight to `resolve_conflict`.
    A matched pair first asks which parent changed its unit relative to the ancestor: changed in one
    only -> that one; in neither (only possible when the frame differs per parent) -> base; in both ->
    `resolve_conflict`. `ancestor_frame` says what "the ancestor's unit" is:
      "own_index" (default): base unit vs ancestor slot i, other unit vs ancestor slot j - each parent is
                  compared in its own index frame, since a parent's slot k descends from the ancestor's
                  slot k; the ancestor is never re-indexed;
      "target":   both vs ancestor slot i (the literal "align the weaker parent, leave the ancestor");
      "any_slot": unchanged = the unit appears anywhere in the ancestor (robust to earlier re-indexing).
    """
    bu, ou = base.library.slot(base_slot), other.library.slot(other_slot)
    if bu == ou:
        return Decision("base", "identical")
    if competing:
        return resolve_conflict(base, other, base_slot, other_slot, rng)
    b_changed = not _in_ancestor(bu, ancestor, base_slot, base_slot, ancestor_frame)
    o_changed = not _in_ancestor(ou, ancestor, other_slot, base_slot, ancestor_frame)
    if b_changed and not o_changed:
        return Decision("base", "changed_in_base_only")
    if o_changed and not b_changed:
        return Decision("other", "changed_in_other_only")
    if not b_changed:
        return Decision("base", "unchanged_in_both")
    return resolve_conflict(base, other, base_slot, other_slot, rng)


def _gepa_component(anc: Any, a: Any, b: Any, base: ParentView, other: ParentView,
                    rng: random.Random) -> tuple[str, str]:
    """GEPA's per-component rule (gepa.proposer.merge, same case order). Returns (source, reason)."""
    if (anc == a or anc == b) and a != b:
        return ("other", "changed_in_other_only") if anc == a else ("base", "changed_in_base_only")
    if anc != a and anc != b:
        if a == b:
            return "base", "same_in_both"
        return aggregate_rule(base, other, rng), "aggregate_rule"
    return "ancestor", "unchanged"  # a == b == anc


def _check_shapes(ancestor: Library, base: ParentView, other: ParentView) -> int:
    k = ancestor.max_specialists
    if base.library.max_specialists != k or other.library.max_specialists != k:
        raise ValueError("ancestor and parents must have the same number of slots (K_max)")
    return k


# -- merges -------------------------------------------------------------------------------------------
def index_merge(ancestor: Library, base: ParentView, other: ParentView, *, rng: random.Random,
                fallback_reason: str | None = None) -> MergeResult:
    """Plain GEPA merge by slot index: per slot unit and for the router, changed in one parent only ->
    take it; changed in both (and different) -> aggregate rule with rng tie-break."""
    k = _check_shapes(ancestor, base, other)
    libs = {"base": base.library, "other": other.library, "ancestor": ancestor}
    src, reason = _gepa_component(ancestor.router, base.library.router, other.library.router, base, other, rng)
    router = RouterProvenance(src, reason)
    slots, prov = [], []
    for s in range(1, k + 1):
        src, reason = _gepa_component(ancestor.slot(s), base.library.slot(s), other.library.slot(s),
                                      base, other, rng)
        slots.append(libs[src].slot(s))
        prov.append(SlotProvenance(s, src, s, reason, "index"))
    child = Library(router=libs[router.source].router, slots=tuple(slots))
    return MergeResult(child, tuple(prov), router, "index", None, None, fallback_reason)


def merge(ancestor: Library, base: ParentView, other: ParentView, *, alignment: str = "mutual_best",
          rng: random.Random, ancestor_frame: str = "own_index") -> MergeResult:
    """Align-and-merge (paper A.2). `base` must be the parent with the higher validation mean.

    Falls back to `index_merge` (fallback_reason="footprint_missing") if either footprint is None.
    Child = base layout; per aligned pair `decide_pair`; placed specialists copied into their free slot;
    unmatched base specialists and unassigned base slots stay as in the base; dropped specialists are
    left out. Router (paper A.2): the base parent's when the other parent's live specialists were
    re-indexed or dropped; when they all keep their indices, GEPA's component rule against the
    ancestor's router (which may select the other parent's router).
    """
    if ancestor_frame not in ANCESTOR_FRAMES:
        raise ValueError(f"ancestor_frame must be one of {ANCESTOR_FRAMES}, got {ancestor_frame!r}")
    k = _check_shapes(ancestor, base, other)
    if base.footprints is None or other.footprints is None:
        return index_merge(ancestor, base, other, rng=rng, fallback_reason="footprint_missing")

    ba, oa = base.library.active_ids(), other.library.active_ids()
    al = align(base.footprints, other.footprints, max_specialists=k, base_active=ba, other_active=oa,
               method=alignment)
    jm = jaccard_matrix({i: base.footprints.get(i, frozenset()) for i in ba},
                        {j: other.footprints.get(j, frozenset()) for j in oa})

    slots = list(base.library.slots)
    prov: dict[int, SlotProvenance] = {}
    pairs = [(i, j, False) for i, j in al.matched] + [(i, j, True) for i, j in al.competing]
    for i, j, comp in sorted(pairs):
        d = decide_pair(ancestor, base, other, i, j, rng, ancestor_frame=ancestor_frame, competing=comp)
        if d.winner == "other":
            slots[i - 1] = other.library.slot(j)
        prov[i] = SlotProvenance(i, d.winner, i if d.winner == "base" else j, d.reason,
                                 "competing" if comp else "matched", j, d.n_shared, d.base_score, d.other_score)
    for j, t in al.placed:
        slots[t - 1] = other.library.slot(j)
        prov[t] = SlotProvenance(t, "other", j, "placed", "placed", j)
    for s in range(1, k + 1):
        if s not in prov:
            reason = "base_unmatched" if base.library.slot(s).active else "base_layout"
            prov[s] = SlotProvenance(s, "base", s, reason, "base_only")
    router = RouterProvenance("base", "base_layout")
    if al.preserves_indices:
        src, reason = _gepa_component(ancestor.router, base.library.router, other.library.router, base, other, rng)
        router = RouterProvenance(src, reason)
    libs = {"base": base.library, "other": other.library, "ancestor": ancestor}
    child = Library(router=libs[router.source].router, slots=tuple(slots))
    return MergeResult(child, tuple(prov[s] for s in range(1, k + 1)), router, alignment, al, jm)
