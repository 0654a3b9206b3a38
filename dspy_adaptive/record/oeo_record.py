"""The OpenEndedOptimizer's run record: run.json (every turn with its action, arguments, observation size, cost
and commit; every checkpoint), report.md and learning_curve.png, written by the one record writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from dspy_adaptive.escaping import md_cell, md_fence
from dspy_adaptive.record import writer
from dspy_adaptive.record.curves import learning_curve


def action_counts(tools: Sequence[str], oks: Sequence[bool]) -> dict[str, dict[str, int]]:
    """Turns and refusals per action."""
    out: dict[str, dict[str, int]] = {}
    for tool, ok in zip(tools, oks):
        entry = out.setdefault(tool, {"turns": 0, "refused": 0})
        entry["turns"] += 1
        entry["refused"] += int(not ok)
    return out


def write_record(record: Mapping[str, Any], log_dir: Path) -> None:
    """run.json, report.md and learning_curve.png of an OEO run (through the one record writer)."""
    writer.write_record(log_dir, data=record, report=render_report(record),
                        plots={"learning_curve.png": lambda path: plot_learning_curve(record, path)})


def render_report(r: Mapping[str, Any]) -> str:
    b = r["budget"]
    lines = ["# Open-ended optimization run", "",
             f"- selected checkpoint: #{r['selected']}; stopped: {r['stop_reason'] or 'n/a'}",
             f"- scored calls: {b['spent']} of {b['max']}; by kind: "
             + ", ".join(f"{k} {v}" for k, v in b["by_kind"].items() if v),
             f"- turns: {len(r['turns'])}; operational failures (refused actions): {r['operational_failures']}", "",
             "## Actions", "", "| action | turns | refused |", "|---|---:|---:|"]
    lines += [f"| {md_cell(a)} | {c['turns']} | {c['refused']} |" for a, c in r["actions"].items()]
    lines += ["", "## Checkpoints", "", "| # | from | validation mean | active slots |", "|---:|---:|---:|---|"]
    for cp in r["checkpoints"]:
        mean = "—" if cp["val_mean"] is None else f"{cp['val_mean']:.4f}"
        active = [str(k) for k, s in enumerate(cp["library"]["slots"], start=1) if s.get("active")]
        lines.append(f"| {cp['index']} | {cp['parent'] if cp['parent'] is not None else '-'} | {mean} | "
                     f"{','.join(active) or '-'} |")
    lines += ["", "## Turns", "", "| turn | action | ok | observation chars | spent after | commit | error |",
              "|---:|---|---|---:|---:|---:|---|"]
    for t in r["turns"]:
        commit, error = t["commit"] if t["commit"] is not None else "", md_cell((t["error"] or "")[:200])
        lines.append(f"| {t['index']} | {md_cell(t['tool'])} | {'yes' if t['ok'] else 'no'} | "
                     f"{t['observation_chars']} | {t['spent_after']} | {commit} | {error} |")
    selected = r["checkpoints"][r["selected"]]["library"]
    lines += ["", "## Selected library", "", "Router:", "", md_fence(selected["router"], "text"), ""]
    for k, slot in enumerate(selected["slots"], start=1):
        if slot.get("active"):
            lines += [f"### Slot {k} ({slot['profile']})", "", md_fence(slot["description"], "text"), "",
                      md_fence(slot["program_source"], "python"), ""]
    lines += ["![learning curve](learning_curve.png)", ""]
    return "\n".join(lines)


def plot_learning_curve(r: Mapping[str, Any], path: Path) -> None:
    """The validation mean of each evaluated checkpoint against the scored calls spent when it was evaluated."""
    means = {cp["index"]: cp["val_mean"] for cp in r["checkpoints"]}
    points = [(t["spent_after"], means.get(_evaluated(t))) for t in r["turns"] if t["tool"] == "evaluate" and t["ok"]]
    learning_curve(path, [(x, y) for x, y in points if y is not None], title="OEO: checkpoint evaluations",
                   ylabel="validation mean of the evaluated checkpoint", steps_label="evaluations")


def _evaluated(turn: Mapping[str, Any]) -> int | None:
    cp = (turn.get("args") or {}).get("checkpoint")
    return cp if isinstance(cp, int) else None



__all__ = ["action_counts", "plot_learning_curve", "render_report", "write_record"]
