"""Replay of archived merges (paper Appendix I.2): which specialists would each merge strategy keep?

    python -m benchmarks.replay RUN_DIR        # RUN_DIR holds run.json (an AdaptiveGEPA log_dir, or a
                                               # benchmarks.run --out directory with search/run.json)

For every archived merge event (a proposal with kind "merge"; its `details` name the ancestor, base and
other candidate indices) the replay rebuilds the two parents' `ParentView`s from the archive — library,
validation mean, per-row validation scores and footprints recomputed from the archived executed slots
(`dspy_adaptive.merge.footprints`) — and re-applies three strategies to the same parents and ancestor:

* ``index``: GEPA's merge by slot index (`dspy_adaptive.merge.index_merge`);
* ``mutual_best``: footprint alignment by mutual best Jaccard matches (`merge(..., alignment="mutual_best")`);
* ``hungarian``: footprint alignment by maximum-weight assignment (`merge(..., alignment="hungarian")`).

Each uses a fresh `random.Random(seed)` per event (seed = the run's seed), so aggregate-rule tie-breaks
may differ from what the live run drew. Children are NOT executed.

Projection (documented approximation, like the paper's): every active slot of a child came from one
library — parent P (base or other) or the ancestor — and its source slot `j` there. That slot is credited
P's archived per-row scores on the validation rows `F_j(P)` that P's specialist `j` executed. A row
credited by several kept specialists gets the mean of those credits. A row no kept specialist served is
credited the fallback's score from the base parent (its archived score there, when the base parent ran
the fallback on that row); failing that, the other parent's fallback score, then the ancestor's. Rows
with no such evidence are left out of the projected mean and counted as ``unprojected``. The projection
ignores routing changes and sampling noise; for the live run's accepted children the measured
validation mean is shown beside it.

Writes ``replay.json`` into RUN_DIR and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from dspy_adaptive.merge import ParentView, footprints, index_merge, merge
from dspy_adaptive.program.library import FALLBACK, Library

STRATEGIES = ("index", "mutual_best", "hungarian")


def find_run_json(run_dir: str | Path) -> Path:
    root = Path(run_dir)
    for cand in (root / "run.json", root / "search" / "run.json"):
        if cand.exists():
            return cand
    raise FileNotFoundError(f"no run.json in {root} or {root / 'search'}: is it a finished AdaptiveGEPA run?")


def _row_ids(run: Mapping[str, Any]) -> list[str]:
    ids: list[str] = []
    for scores in run["val_subscores"]:
        for rid in scores:
            if rid not in ids:
                ids.append(rid)
    return ids


def _view(run: Mapping[str, Any], idx: int, row_ids: Sequence[str]) -> ParentView:
    lib = Library.from_dict(run["candidates"][idx])
    executed = dict(run["executed"][idx])
    return ParentView(lib, float(run["val_aggregate_scores"][idx]), footprints(lib, executed, row_ids),
                      {k: float(v) for k, v in run["val_subscores"][idx].items()})


def project(result: Any, views: Mapping[str, tuple[int, ParentView, Mapping[str, Any]]],
            row_ids: Sequence[str]) -> dict[str, Any]:
    """Projected per-row scores of a merge child (see the module docstring). `views`: source name ->
    (candidate index, ParentView, executed map) for "base", "other", "ancestor"."""
    credits: dict[str, list[float]] = {}
    kept = []
    for prov in result.slots:
        slot = result.child.slot(prov.slot)
        if not slot.active:
            continue
        idx, view, executed = views[prov.source]
        served = [r for r in row_ids if executed.get(r) == prov.from_slot]
        for r in served:
            if r in view.row_scores:
                credits.setdefault(r, []).append(view.row_scores[r])
        kept.append({"slot": prov.slot, "description": slot.description, "source": prov.source,
                     "source_candidate": idx, "from_slot": prov.from_slot, "reason": prov.reason,
                     "rows_credited": len(served)})
    scores: dict[str, float] = {}
    unprojected = 0
    for r in row_ids:
        if r in credits:
            scores[r] = sum(credits[r]) / len(credits[r])
            continue
        for name in ("base", "other", "ancestor"):
            _, view, executed = views[name]
            if executed.get(r) == FALLBACK and r in view.row_scores:
                scores[r] = view.row_scores[r]
                break
        else:
            unprojected += 1
    mean = sum(scores.values()) / len(scores) if scores else None
    return {"kept": kept, "projected_mean": mean, "projected_rows": len(scores), "unprojected": unprojected}


def replay_run(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    row_ids = _row_ids(run)
    seed = int(run.get("seed", 0) or 0)
    events = []
    for p in run["proposals"]:
        if p.get("kind") != "merge":
            continue
        d = p.get("details") or {}
        if not all(k in d for k in ("ancestor", "base", "other")):
            continue
        idx = {"base": int(d["base"]), "other": int(d["other"]), "ancestor": int(d["ancestor"])}
        views = {name: (i, _view(run, i, row_ids), run["executed"][i]) for name, i in idx.items()}
        anc = views["ancestor"][1].library
        base, other = views["base"][1], views["other"][1]
        out: dict[str, Any] = {"iteration": p.get("iteration"), **idx, "accepted": bool(p.get("accepted")),
                               "child_index": p.get("child_index"),
                               "measured_child_mean": (run["val_aggregate_scores"][p["child_index"]]
                                                       if p.get("child_index") is not None else None),
                               "parent_means": {"base": base.val_mean, "other": other.val_mean},
                               "live_method": d.get("method"), "strategies": {}}
        for strategy in STRATEGIES:
            rng = random.Random(seed)
            try:
                res = (index_merge(anc, base, other, rng=rng) if strategy == "index"
                       else merge(anc, base, other, alignment=strategy, rng=rng))
            except Exception as e:  # noqa: BLE001 - a strategy that cannot run on this event is reported
                out["strategies"][strategy] = {"error": f"{type(e).__name__}: {e}"}
                continue
            proj = project(res, views, row_ids)
            proj["method"] = res.method
            out["strategies"][strategy] = proj
        events.append(out)
    return events


def _cell(s: Mapping[str, Any]) -> tuple[str, str]:
    if "error" in s:
        return f"error: {s['error']}", "—"
    kept = "; ".join(f"{k['slot']}←{k['source']}#{k['source_candidate']}.{k['from_slot']}: {k['description'][:60]}"
                     for k in s["kept"]) or "(none)"
    mean = "—" if s["projected_mean"] is None else f"{100 * s['projected_mean']:.1f}"
    if s.get("unprojected"):
        mean += f" ({s['unprojected']} rows unprojected)"
    return kept, mean


def render(events: Sequence[Mapping[str, Any]]) -> str:
    from dspy_adaptive.record.analysis import markdown_table
    if not events:
        return "_No merge events in this run._"
    rows = []
    for i, e in enumerate(events):
        measured = "—" if e["measured_child_mean"] is None else f"{100 * e['measured_child_mean']:.1f}"
        parents = f"base #{e['base']} ({100 * e['parent_means']['base']:.1f}), other #{e['other']} " \
                  f"({100 * e['parent_means']['other']:.1f}); ancestor #{e['ancestor']}"
        for strategy, s in e["strategies"].items():
            kept, mean = _cell(s)
            rows.append([i, e["iteration"], parents, strategy, kept, mean,
                         measured if strategy == e.get("live_method") else ""])
    return markdown_table(["event", "iter", "parents", "strategy", "kept specialists (slot←source#cand.slot)",
                           "projected mean ×100", "measured child ×100"], rows)


def replay(run_dir: str | Path) -> tuple[list[dict[str, Any]], str]:
    path = find_run_json(run_dir)
    run = json.loads(path.read_text(encoding="utf-8"))
    events = replay_run(run)
    text = ("# Merge replay (Appendix I.2)\n\nProjected means credit each kept specialist with its source "
            "parent's archived scores on the rows it executed; see benchmarks/replay.py.\n\n" + render(events) + "\n")
    (Path(run_dir) / "replay.json").write_text(json.dumps({"run": str(path), "events": events}, indent=1),
                                               encoding="utf-8")
    return events, text


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.replay",
                                description="Re-apply index / mutual-best / Hungarian merges to a finished "
                                            "AdaptiveGEPA run's archived merge events (paper Appendix I.2).")
    p.add_argument("run_dir", help="directory holding run.json (or search/run.json)")
    args = p.parse_args(argv)
    _, text = replay(args.run_dir)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
