"""Post-validation cleanup of a merged child (paper Appendix A.2 "Cleanup after a merge")."""

from __future__ import annotations

from typing import Mapping

from dspy_adaptive.merge.footprints import selected_slots
from dspy_adaptive.program.library import Library


def cleanup(library: Library, selected: Mapping[str, int | None]) -> tuple[Library, tuple[int, ...]]:
    """Deactivate active specialists the router never *selected* on the validation rows
    (`selected[row_id]` = router selection). Program text is kept (`Slot.deactivated`).
    Returns the cleaned library and the changed slot ids (ascending)."""
    used = selected_slots(selected)
    changed = tuple(k for k in library.active_ids() if k not in used)
    out = library
    for k in changed:
        out = out.with_slot(k, out.slot(k).deactivated())
    return out, changed
