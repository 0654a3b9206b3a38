"""`AdaptiveGEPA(distill_router=...)`: distil the compiled program's LM router at the end of compile."""

from __future__ import annotations

import logging
from typing import Any, Sequence

from dspy_adaptive.distill.report import compile_record
from dspy_adaptive.distill.train import DistillError, DistillSettings

#: a dspy_adaptive.program.routed.RoutedProgram (not imported: it imports this package)
RoutedProgram = Any


log = logging.getLogger(__name__)


def distill_after_compile(routed: "RoutedProgram", train: Sequence[Any], val: Sequence[Any],
                          option: Any, num_threads: int | None = None) -> dict[str, Any]:
    """Distil `routed` on the train and validation requests (once each; the validation set may be the train
    set) plus the option's own requests; the run record's entry. Never raises for a distillation that could not
    be built or failed (an LM router error while labelling, ...): the program keeps its LM router and the record
    says why."""
    settings = option if isinstance(option, DistillSettings) else DistillSettings()
    if settings.num_threads is None and num_threads:
        from dataclasses import replace
        settings = replace(settings, num_threads=num_threads)
    seen: set[str] = set()
    requests = []
    for row in list(train) + list(val):
        if row.id not in seen:
            seen.add(row.id)
            requests.append(row.example)
    if not routed.library.active_ids():
        return compile_record(None, "the best library has no active specialist, so the program never calls its "
                                    "LM router: there is nothing to distill")
    try:
        return compile_record(routed.distill_router(requests, settings))
    except DistillError as e:
        log.warning("no distilled router: %s", e)
        return compile_record(None, str(e))
    except Exception as e:  # noqa: BLE001 - the search's result is worth more than its distillation
        log.warning("distilling the router failed (%s: %s); the LM router serves", type(e).__name__, e)
        return compile_record(None, f"distillation failed: {type(e).__name__}: {str(e)[:300]}")
