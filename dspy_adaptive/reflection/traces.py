"""What reflection reads: feedback-minibatch records and recent proposals, rendered as text.

Only input fields, the route, predictor steps, the output, the score, feedback and errors are
rendered — never an example's label fields (answers, family tags), which stay with the metric.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Sequence

import dspy

from dspy_adaptive.data import Row
from dspy_adaptive.library import Library
from dspy_adaptive.records import ProposalRecord, RowResult, clip, slot_label


def describe_route(r: RowResult) -> str:
    if r.executed is None:
        return "route unknown (the call failed before a specialist ran)"
    sel = "an unparseable answer" if r.selected is None else f"slot {r.selected}" if r.selected else "0 (fallback)"
    ran = slot_label(r.executed)
    why = f" because {r.fallback_reason}" if r.fallback_reason else ""
    return f"router selected {sel}; executed {ran}{why}"


def render_input(value: Any, images: list | None) -> str:
    """An input value as text; a `dspy.Type` (dspy.Image, ...) -- alone or in a list -- becomes a placeholder
    "[image k]" and is appended to `images`, so reflection receives it as structured content, as dspy.GEPA
    3.4.1 sends it (with `images` None: its text, as before)."""
    if images is not None:
        items = value if isinstance(value, (list, tuple)) else [value]
        if items and all(isinstance(v, dspy.Type) for v in items):
            marks = []
            for v in items:
                images.append(v)
                marks.append(f"[{type(v).__name__.lower()} {len(images)}]")
            return ", ".join(marks)
    return clip(value, 1500)


def render_record(n: int, row: Row, r: RowResult, images: list | None = None) -> str:
    lines = [f"### Request {n}", "Inputs:"]
    lines += [f"  {k}: {render_input(v, images)}" for k, v in row.inputs.items()]
    lines.append(f"Route: {describe_route(r)}")
    if r.steps:
        lines.append("Steps:")
        for s in r.steps:
            ins = "; ".join(f"{k}={v}" for k, v in s["inputs"].items())
            outs = "; ".join(f"{k}={v}" for k, v in s["outputs"].items())
            lines.append(f"  - {s['predictor']}: [{clip(ins, 700)}] -> [{clip(outs, 700)}]")
    if r.output is not None:
        lines.append("Output: " + "; ".join(f"{k}={v}" for k, v in r.output.items()))
    if r.error:
        lines.append(f"Error: {r.error}")
    lines.append(f"Score: {r.score:g}")
    lines.append(f"Feedback: {r.feedback}")
    return "\n".join(lines)


def render_traces(rows: Sequence[Row], results: Sequence[RowResult], images: list | None = None) -> str:
    """The minibatch records as text; with `images` (a list), dspy.Type inputs are collected into it and shown
    as placeholders."""
    return "\n\n".join(render_record(i + 1, row, r, images) for i, (row, r) in enumerate(zip(rows, results)))


def render_slots(library: Library) -> str:
    """All K slots with their descriptions (INACTIVE marks a free slot) and profile; no source."""
    out = []
    for k, s in library.items():
        state = f"active, {s.profile} profile" if s.active else "free"
        out.append(f"{k} ({state}): {s.description}")
    return "\n".join(out)


def render_usage(library: Library, results: Sequence[RowResult]) -> str:
    ran = Counter(r.executed for r in results)
    total = len(results)
    parts = [f"fallback: {ran.get(0, 0)}/{total}"]
    parts += [f"slot {k}: {ran.get(k, 0)}/{total}" for k in library.active_ids()]
    failed = sum(1 for r in results if r.error)
    if failed:
        parts.append(f"runtime failures: {failed}/{total}")
    return "requests executed per slot on this minibatch — " + ", ".join(parts)


def recent_history(proposals: Iterable[ProposalRecord], lineage: set[int] | frozenset[int],
                   limit: int) -> tuple[ProposalRecord, ...]:
    """The last `limit` proposals made on `lineage` (a candidate and its ancestors); skips are left out."""
    return tuple([p for p in proposals if p.kind != "skip" and set(p.parents) & lineage][-limit:])


def render_history(proposals: Sequence[ProposalRecord]) -> str:
    """One line per proposal: what was tried on which candidate, and how it ended."""
    lines = []
    for p in proposals:
        target = f" slot {p.slot}" if p.slot else ""
        outcome = "accepted" if p.accepted else f"rejected: {p.reason}"
        sums = f" (minibatch {p.parent_sum:g} -> {p.child_sum:g})" if p.child_sum is not None else ""
        lines.append(f"- iteration {p.iteration}: {p.kind} {p.action or ''}{target} on candidate "
                     f"{'/'.join(map(str, p.parents))}: {outcome}{sums}")
    return "\n".join(lines)
