"""Footprints and their Jaccard overlap (paper §3.3, Eq. 6; Appendix A.2 "Footprint records").

A specialist's footprint is the set of validation row ids it actually *executed*: a router selection
that resolved to the fallback (slot 0) is no evidence for the selected specialist. Rows are matched
by example id, never by position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from dspy_adaptive.program.library import FALLBACK, Library

Footprints = dict[int, frozenset[str]]


def footprints(library: Library, executed: Mapping[str, int | None],
               row_ids: Sequence[str]) -> Footprints | None:
    """`F_i` for every active slot `i` of `library` over the validation rows `row_ids`.

    `executed[row_id]` is the slot that ran (0 = fallback). A record of None means the route of that
    row is unknown (e.g. the router call raised before any slot ran): the row is left out of every
    footprint (`unknown_rows` lists such rows) and the others still count, so one router exception does
    not cost a candidate its whole footprint. Returns None ("footprint missing") when any row in
    `row_ids` has no record at all, or a record that is not a slot number, or names a slot that is not
    an active slot of `library` (the records then cannot belong to this candidate). Records for rows
    outside `row_ids` are ignored. Every active slot gets an entry, possibly an empty set.
    """
    active = set(library.active_ids())
    rows: dict[int, set[str]] = {k: set() for k in active}
    for rid in row_ids:
        if rid not in executed:
            return None
        slot = executed[rid]
        if slot is None:
            continue   # route unknown: no evidence either way (see unknown_rows)
        if isinstance(slot, bool) or not isinstance(slot, int):
            return None
        if slot == FALLBACK:
            continue
        if slot not in active:
            return None
        rows[slot].add(rid)
    return {k: frozenset(v) for k, v in sorted(rows.items())}


def unknown_rows(executed: Mapping[str, int | None], row_ids: Sequence[str]) -> list[str]:
    """Rows of `row_ids` whose executed slot is recorded as unknown (None): left out of the footprints."""
    return [rid for rid in row_ids if rid in executed and executed[rid] is None]


def selected_slots(selected: Mapping[str, int | None]) -> frozenset[int]:
    """Slot ids the router selected at least once (fallback 0 and unknown records excluded).

    Cleanup uses router *selections*, unlike footprints, which use executions (paper A.2)."""
    return frozenset(s for s in selected.values()
                     if isinstance(s, int) and not isinstance(s, bool) and s != FALLBACK)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


@dataclass(frozen=True)
class JaccardMatrix:
    """`J[i][j]` for slots `i` of parent a (rows) and `j` of parent b (cols)."""

    rows: tuple[int, ...]
    cols: tuple[int, ...]
    values: tuple[tuple[float, ...], ...]

    def get(self, i: int, j: int) -> float:
        """J_ij; 0.0 for a slot that is not a row/col (no footprint = empty footprint)."""
        try:
            return self.values[self.rows.index(i)][self.cols.index(j)]
        except ValueError:
            return 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"rows": list(self.rows), "cols": list(self.cols), "values": [list(r) for r in self.values]}


def jaccard_matrix(fa: Mapping[int, frozenset[str]], fb: Mapping[int, frozenset[str]]) -> JaccardMatrix:
    rows, cols = tuple(sorted(fa)), tuple(sorted(fb))
    return JaccardMatrix(rows=rows, cols=cols,
                         values=tuple(tuple(jaccard(fa[i], fb[j]) for j in cols) for i in rows))
