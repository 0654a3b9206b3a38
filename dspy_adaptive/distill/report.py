"""The distilled router in the run record (run.json's `distilled_router`) and in report.md.

`compile_record` is what `AdaptiveGEPA(distill_router=...)` records after distilling: what was built (or why
nothing was), the held-out figures it was chosen on, what labelling cost, and what serving with it saves per
1,000 requests, projected from the held-out share still sent to the LM router and the measured LM router
calls, tokens and latency. `markdown_lines` renders it.
"""

from __future__ import annotations

from typing import Any, Mapping

from dspy_adaptive.distill.model import DistilledRouter
from dspy_adaptive.escaping import md_cell, md_text


def compile_record(d: DistilledRouter | None, reason: str | None = None) -> dict[str, Any]:
    """The run record's entry for a distillation (d None: nothing was built, `reason` says why)."""
    if d is None:
        return {"built": False, "reason": reason or "not built"}
    t = d.training
    held = t.get("heldout") or {}
    lab = t.get("labelling") or {}
    share = float(held.get("share_lm_router", 1.0))
    per_call = lab.get("tokens_per_call")
    lm_ms, clf_ms = lab.get("mean_ms"), t.get("classifier_ms_per_request")
    projected = {"router_calls_saved_per_1000": round(1000 * (1 - share), 1),
                 "router_tokens_saved_per_1000": None if per_call is None else round(1000 * (1 - share) * per_call),
                 "routing_ms_lm": None if lm_ms is None else round(lm_ms, 3),
                 "routing_ms_distilled": None if lm_ms is None or clf_ms is None else round(clf_ms + share * lm_ms, 3)}
    return {"built": True, **d.summary(), "candidates": t.get("candidates"), "labelling": lab,
            "train_seconds": t.get("train_seconds"), "classifier_ms_per_request": clf_ms, "projected": projected}


def _by_slot(labels: Any) -> str:
    if not isinstance(labels, Mapping):
        return "by slot: ?"
    names = {str(k): ("fallback" if str(k) == "0" else f"slot {k}") for k in labels}
    return "by slot: " + ", ".join(f"{names[str(k)]} {v}" for k, v in labels.items())


def _pct(x: Any) -> str:
    return "—" if x is None else f"{100 * float(x):.1f}%"


def markdown_lines(record: Mapping[str, Any] | None) -> list[str]:
    """report.md's "Distilled router" section (nothing when no distillation was asked for)."""
    if not record:
        return []
    lines = ["", "## Distilled router", ""]
    if not record.get("built"):
        why = md_text(str(record.get("reason", "")).rstrip("."))
        return lines + [f"Not built: {why}. The LM router serves every request."]
    held, lab, proj = record.get("heldout") or {}, record.get("labelling") or {}, record.get("projected") or {}
    candidates = ", ".join(f"{md_cell(n)} {_pct(c.get('agreement'))}"
                           for n, c in (record.get("candidates") or {}).items())
    lines += [f"The optimized LM router's decisions on {record.get('requests')} train and validation requests "
              f"({md_text(_by_slot(record.get('labels')))}) were learnt by {md_text(str(record.get('chosen')))} "
              f"({md_text(str(record.get('features')))}), calibrated by temperature scaling; requests under "
              f"confidence {float(record.get('threshold', 1)):.3f} still go to the LM router.", "",
              "| held-out (cross-validated) | value |", "|---|---:|",
              f"| agreement with the LM router, as served | {_pct(held.get('agreement'))} |",
              f"| classifier's own agreement | {_pct(held.get('classifier_agreement'))} |",
              f"| share still calling the LM router | {_pct(held.get('share_lm_router'))} |",
              f"| router LM calls saved per 1,000 requests | {proj.get('router_calls_saved_per_1000', '—')} |",
              f"| router tokens saved per 1,000 requests | {proj.get('router_tokens_saved_per_1000') or '—'} |",
              f"| routing time per request, LM router (ms) | {proj.get('routing_ms_lm', '—')} |",
              f"| routing time per request, distilled (ms) | {proj.get('routing_ms_distilled', '—')} |", "",
              f"Labelling cost {lab.get('router_calls', 0)} router calls ({lab.get('router_tokens', 0)} tokens; "
              "cached calls report none); candidates by held-out agreement: "
              + candidates + ". The task score with it against the LM router is measured on test by "
              "`python -m benchmarks.run --distill-router`."]
    return lines


__all__ = ["compile_record", "markdown_lines"]
