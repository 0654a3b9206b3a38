"""Read boundaries of the reflection calls (paper Table 6, Appendix E), applied to the records themselves.

A program rewrite reads the traces, the target description and the target source, and nothing about the
other specialists' descriptions or sources. A RoutedProgram's trace holds the router's own predictor
call, whose `specialists` input lists every active description: shown as it is, a program rewrite would
read its siblings' descriptions through the traces. `for_program_rewrite` returns the records with that
input withheld (the router's answer and the route stay), before they are rendered.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from dspy_adaptive.schema import RowResult

ROUTER_PREDICTOR = "router"                 # RoutedProgram.predictor_label of the router's predictor
DESCRIPTIONS_INPUT = "specialists"          # the router signature's input that lists the active descriptions
WITHHELD = "(withheld: a program rewrite does not read the other specialists' descriptions)"


def _redact_step(step: dict[str, Any]) -> dict[str, Any]:
    if step.get("predictor") != ROUTER_PREDICTOR or DESCRIPTIONS_INPUT not in (step.get("inputs") or {}):
        return step
    return {**step, "inputs": {**step["inputs"], DESCRIPTIONS_INPUT: WITHHELD}}


def for_program_rewrite(results: Sequence[RowResult]) -> tuple[RowResult, ...]:
    """The records as a program rewrite may read them: router steps without the description list."""
    return tuple(replace(r, steps=tuple(_redact_step(s) for s in r.steps)) for r in results)


__all__ = ["for_program_rewrite", "WITHHELD"]
