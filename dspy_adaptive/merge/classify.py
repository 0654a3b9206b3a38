"""Classify an archived merge child against its parents (paper Appendix H, Table 10).

Comparisons use exact content equality, independent of slot index.
"""

from __future__ import annotations

from collections import Counter

from dspy_adaptive.program.library import Library

CLASSES = ("pairs_from_both", "identical_to_parent", "inactive_code_only", "router_only", "other")


def _slots(lib: Library) -> Counter:
    return Counter(lib.slots)


def _active(lib: Library) -> Counter:
    return Counter(s for s in lib.slots if s.active)


def _pairs(lib: Library) -> set[tuple[str, str]]:
    return {(s.description, s.program_source) for s in lib.slots if s.active}


def classify_child(child: Library, a: Library, b: Library) -> str:
    """One of CLASSES, checked in this order:

    identical_to_parent: same router and same multiset of slots (all fields) as a parent;
    pairs_from_both:     the child's active (description, program) pairs include one unique to a
                         (in a, not in b) and one unique to b;
    inactive_code_only:  same router and active slots as a parent; only inactive slots differ;
    router_only:         same slots (all, any order) as a parent; only the router differs;
    other:               anything else.
    """
    for p in (a, b):
        if child.router == p.router and _slots(child) == _slots(p):
            return "identical_to_parent"
    pa, pb, pc = _pairs(a), _pairs(b), _pairs(child)
    if pc & (pa - pb) and pc & (pb - pa):
        return "pairs_from_both"
    for p in (a, b):
        if child.router == p.router and _active(child) == _active(p):
            return "inactive_code_only"
    for p in (a, b):
        if _slots(child) == _slots(p):
            return "router_only"
    return "other"
