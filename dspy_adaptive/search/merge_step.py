"""Merge step: pair -> align -> inherit -> gate -> validate -> cleanup -> archive.

The math lives in `dspy_adaptive.merge` (pure functions); this module wires it into the search:
choosing the pair among frontier candidates, scoring the child on five validation rows both parents
were scored on (charged as `merge_check`), full validation for a child that passes, and the
post-merge cleanup (archived scores stay the measured pre-cleanup ones). A merge that finds no
eligible pair builds nothing and costs nothing.
"""

from __future__ import annotations

from typing import Any

from gepa.gepa_utils import find_dominator_programs

from dspy_adaptive.library import Library
from dspy_adaptive.merge import (LineageNode, ParentView, align, classify_child, cleanup, find_merge_pair,
                                 footprints, gate_passes, has_desirable_component, merge, select_gate_rows)
from dspy_adaptive.search import gate


class Merger:
    def __init__(self, alignment: str = "mutual_best", gate_rows: int = 5):
        self.alignment = alignment
        self.gate_rows = gate_rows

    def _desirable_after_alignment(self, arch: Any, anc: LineageNode, x: LineageNode, y: LineageNode) -> bool:
        """GEPA's eligibility check ("some component differs and matches the ancestor in one parent"),
        applied after aligning the weaker parent to the base layout, as the paper specifies: two branches
        that grew different roles in the same slot index are mergeable."""
        base, other = (x, y) if (x.val_mean, -x.index) >= (y.val_mean, -y.index) else (y, x)
        row_ids = arch.row_ids
        fb = footprints(base.library, arch[base.index].executed, row_ids)
        fo = footprints(other.library, arch[other.index].executed, row_ids)
        if fb is None or fo is None:
            return has_desirable_component(anc.library, x.library, y.library)
        al = align(fb, fo, max_specialists=base.library.max_specialists, base_active=base.library.active_ids(),
                   other_active=other.library.active_ids(), method=self.alignment)
        return has_desirable_component(anc.library, base.library, aligned_view(anc.library, other.library, al))

    def run(self, engine: Any):
        arch = engine.archive
        nodes = [LineageNode(c.index, c.parents, c.library, c.val_mean) for c in arch.candidates]
        frontier = sorted(find_dominator_programs(arch.pareto_fronts(), [c.val_mean for c in arch.candidates]))
        tried = {frozenset(t) for t in engine.merge_state["tried"]}
        pair = find_merge_pair(nodes, engine.rng, tried, candidates=frontier,                   # pair
                               component_check=lambda c, x, y: self._desirable_after_alignment(arch, c, x, y))
        if pair is None:
            return None
        engine.merge_state["tried"].append(sorted([pair.base, pair.other]))
        engine.merge_state["invocations"] += 1
        engine.merge_state["accepted_since"] = 0
        base, other, anc = arch[pair.base], arch[pair.other], arch[pair.ancestor]
        a, b = sorted((base, other), key=lambda c: c.index)
        row_ids = arch.row_ids
        views = [ParentView(c.library, c.val_mean, footprints(c.library, c.executed, row_ids), c.scores)
                 for c in (base, other)]
        result = merge(anc.library, views[0], views[1], alignment=self.alignment, rng=engine.rng)  # align, inherit
        child = result.child
        gate_ids = select_gate_rows(a.scores, b.scores, engine.rng, n=self.gate_rows)              # gate
        by_id = {r.id: r for r in engine.val}
        check = engine.evaluator.evaluate(child, [by_id[i] for i in gate_ids], "merge_check", tag=engine.iteration)
        sum_child = gate.score_sum(check)
        sum_a = sum(a.scores[i] for i in gate_ids)
        sum_b = sum(b.scores[i] for i in gate_ids)
        passed = gate_passes(sum_child, sum_a, sum_b)
        details: dict[str, Any] = {
            "ancestor": anc.index, "base": base.index, "other": other.index, "method": result.method,
            "merge": result.to_dict(), "gate_rows": list(gate_ids),
            "gate_sums": {"child": sum_child, str(a.index): sum_a, str(b.index): sum_b},
        }
        cand = None
        if passed:                                                                                 # validate
            results = engine.evaluator.evaluate(child, engine.val, "validation", tag=engine.iteration)
            cleaned, changed = cleanup(child, {r.row_id: r.selected for r in results})           # cleanup
            cand = engine.add_to_archive(cleaned, (a.index, b.index), "merge", results,
                                         engine.iteration)                                        # archive
            details["cleanup_deactivated"] = list(changed)
            details["measured_hash"] = child.content_hash   # the scores were measured on this, pre-cleanup
            details["classification"] = classify_child(cleaned, a.library, b.library)
        return engine._record(iteration=engine.iteration, kind="merge", parents=(a.index, b.index), action="merge", slot=None,
                              minibatch=tuple(gate_ids), parent_sum=max(sum_a, sum_b), child_sum=sum_child,
                              accepted=passed, reason=None if passed else
                              "merged child scored below the stronger parent on the gate rows",
                              child=cand, child_library=child, details=details)


def aligned_view(ancestor: Library, other: Library, alignment: Any) -> Library:
    """The other parent re-indexed to the base layout: its aligned specialists at their target slots,
    the ancestor's unit everywhere else (so unassigned slots read as "unchanged")."""
    view = ancestor.with_router(other.router)
    for j, t in alignment.mapping.items():
        view = view.with_slot(t, other.slot(j))
    return view
