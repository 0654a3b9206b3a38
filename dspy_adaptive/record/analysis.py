"""Post-hoc analysis of a finished run (pure functions over an `AdaptiveGEPAResult`).

Family labels (`row_labels`: validation row id -> family) come from the benchmark and are used for
analysis only; the search never sees them. A run directory may carry them as `labels.json`.
Slot ids follow the library: 0 is the fallback, 1.. are specialist slots, None means "unknown"
(no footprint was recorded for that row).
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Mapping

from dspy_adaptive.escaping import md_cell, md_code, md_fence, md_text
from dspy_adaptive.program.library import Library
from dspy_adaptive.record.run_record import AdaptiveGEPAResult, run_json_path
from dspy_adaptive.schema import ancestors, slot_label

LABELS_FILE = "labels.json"

RoutingTable = dict[str, dict[int | None, int]]


# -- run directories & labels ------------------------------------------------------------------------

def load_labels(run_dir: str | Path) -> dict[str, str] | None:
    """`run_dir/labels.json` ({"row_id": "family", ...}) or None when the file is absent."""
    path = Path(run_dir) / LABELS_FILE
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object mapping row id -> family label")
    return {str(k): str(v) for k, v in data.items()}


def write_labels(row_labels: Mapping[str, str], run_dir: str | Path) -> Path:
    path = Path(run_dir) / LABELS_FILE
    path.write_text(json.dumps(dict(row_labels), indent=1, sort_keys=True), encoding="utf-8")
    return path


def latest_run_dir(root: str | Path = "runs") -> Path | None:
    """The directory under `root` (searched recursively) whose run.json is newest, or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    records = sorted(root.glob("**/run.json"), key=lambda p: p.stat().st_mtime)
    return records[-1].parent if records else None


def run_record_dir(path: str | Path) -> Path:
    """The directory holding run.json for `path`: the path itself, or the run inside a demo's --out folder
    (`search/`) or any single folder below it; a clear error when there is none."""
    root = Path(path).expanduser().resolve()
    try:
        return run_json_path(root).parent
    except FileNotFoundError:
        pass
    found = latest_run_dir(root)
    if found is not None:
        return found.resolve()
    raise FileNotFoundError(f"no run.json in {root} or below it: give the log_dir of a finished run, or the demo's "
                            "--out folder (rerun the demo to finish an interrupted run)")


DEMO_OUT = "runs/demo"     # the demo's default --out


def user_dirs(search_from: str | Path | None = None) -> list[Path]:
    """Where a relative path given by the user is read from, in order: `search_from`, else the directory the user
    started Jupyter or nbconvert in (`$PWD`, which the kernel inherits from that shell), then the process's own
    directory (a notebook's kernel runs in notebooks/) and the directories above it."""
    here = Path.cwd().resolve()
    first = [Path(search_from).resolve()] if search_from else \
        ([Path(os.environ["PWD"]).resolve()] if os.environ.get("PWD") else [])
    out: list[Path] = []
    for start in (*first, here):
        for base in (start, *start.parents):
            if base not in out:
                out.append(base)
    return out


def open_run_dir(env_var: str = "RUN_DIR", search_from: str | Path | None = None) -> tuple[Path, str]:
    """(run directory, a sentence saying which run was opened and why). `$RUN_DIR` (a log_dir, or a demo's --out
    folder holding search/) is read from where the user stands (`user_dirs`); without it the demo's runs/demo is
    opened when there is one, else the newest runs/**/run.json."""
    value = os.environ.get(env_var)
    bases = user_dirs(search_from)
    if value:
        path = Path(value).expanduser()
        tried = [path] if path.is_absolute() else [b / path for b in bases]
        for candidate in tried:
            if candidate.exists():
                found = run_record_dir(candidate)
                return found, f"opened ${env_var}={value}: {found}"
        raise FileNotFoundError(f"${env_var}={value} was not found; looked in " + ", ".join(map(str, tried[:4]))
                                + ". Give the demo's --out folder or a run's log_dir (absolute, or relative to "
                                  "where you started Jupyter).")
    for base in bases:
        demo = base / DEMO_OUT
        if (demo / "search" / "run.json").is_file():
            return (demo / "search").resolve(), (f"opened the demo's run {demo} (${env_var} is not set; set it to "
                                                 "open another run)")
        found = latest_run_dir(base / "runs")
        if found is not None:
            return found.resolve(), (f"opened the newest run under {base / 'runs'}: {found} (${env_var} is not set; "
                                     "set it to open another run)")
    raise FileNotFoundError(f"${env_var} is not set and no runs/**/run.json was found from {bases[0]} upwards: run "
                            f"the demo, or set {env_var} to a run's log_dir or the demo's --out folder")


def resolve_run_dir(env_var: str = "RUN_DIR", search_from: str | Path | None = None) -> Path:
    """The run directory `open_run_dir` chooses."""
    return open_run_dir(env_var, search_from)[0]


# -- routing --------------------------------------------------------------------------------------------

def _candidate(result: AdaptiveGEPAResult, candidate: int | None) -> int:
    idx = result.best_idx if candidate is None else candidate
    if not 0 <= idx < len(result.candidates):
        raise IndexError(f"candidate {idx} out of range 0..{len(result.candidates) - 1}")
    return idx


def routing_table(result: AdaptiveGEPAResult, row_labels: Mapping[str, str], candidate: int | None = None,
                  source: str = "executed") -> RoutingTable:
    """label -> slot -> number of validation rows of that family routed to that slot.

    `source="executed"` counts the slot that actually ran (footprints); `"selected"` the router's pick.
    Rows without a label are skipped. Labels and slots appear in sorted order (None last).
    """
    if source not in ("executed", "selected"):
        raise ValueError("source must be 'executed' or 'selected'")
    routes = getattr(result, source)[_candidate(result, candidate)]
    table: dict[str, Counter] = defaultdict(Counter)
    for row, slot in routes.items():
        label = row_labels.get(row)
        if label is not None:
            table[label][slot] += 1
    return {label: {s: table[label][s] for s in sorted(table[label], key=_slot_key)} for label in sorted(table)}


def _slot_key(slot: int | None) -> tuple[bool, int]:
    return (slot is None, slot or 0)


def slot_majority(table: RoutingTable) -> dict[int, str]:
    """Each known slot (fallback 0 included) -> the family with most rows on it (ties: alphabetical first)."""
    per_slot: dict[int, Counter] = defaultdict(Counter)
    for label, counts in table.items():
        for slot, n in counts.items():
            if slot is not None and n:
                per_slot[slot][label] += n
    return {slot: min(c, key=lambda lab: (-c[lab], lab)) for slot, c in sorted(per_slot.items())}


def majority_mapping_agreement(table: RoutingTable) -> tuple[dict[str, float], float]:
    """Paper Table 4: map each slot to the majority family of the rows it executed (the fallback is
    its own "slot 0"); agreement = share of rows whose slot maps to their own family, in percent.

    Returns (per-label %, overall %). Rows with an unknown slot (None) count as disagreeing.
    """
    mapping = slot_majority(table)
    per_label, hit_total, row_total = {}, 0, 0
    for label, counts in table.items():
        rows = sum(counts.values())
        hits = sum(n for slot, n in counts.items() if slot is not None and mapping.get(slot) == label)
        per_label[label] = 100.0 * hits / rows if rows else 0.0
        hit_total, row_total = hit_total + hits, row_total + rows
    return per_label, (100.0 * hit_total / row_total if row_total else 0.0)


def per_family_scores(result: AdaptiveGEPAResult, row_labels: Mapping[str, str],
                      candidate: int | None = None) -> dict[str, float]:
    """label -> mean validation score of `candidate` (default best) over that family's rows."""
    scores = result.val_subscores[_candidate(result, candidate)]
    groups: dict[str, list[float]] = defaultdict(list)
    for row, score in scores.items():
        label = row_labels.get(row)
        if label is not None:
            groups[label].append(float(score))
    return {label: sum(v) / len(v) for label, v in sorted(groups.items())}


# -- lineage --------------------------------------------------------------------------------------------

def lineage_edges(result: AdaptiveGEPAResult) -> list[tuple[int, int, str]]:
    """(parent, child, kind) for every archived candidate; kind is "merge" or "reflect"."""
    edges = []
    for child, parents in enumerate(result.parents):
        kind = "merge" if result.origins[child] == "merge" or len(parents) > 1 else "reflect"
        edges += [(int(p), child, kind) for p in parents]
    return edges


def ancestry(result: AdaptiveGEPAResult, idx: int) -> frozenset[int]:
    """All ancestors of candidate `idx` (not including `idx` itself)."""
    return ancestors(result.parents, idx)


def generations(result: AdaptiveGEPAResult) -> list[int]:
    """Depth from the seed(s): 0 for parentless candidates, else 1 + the deepest parent."""
    depth: dict[int, int] = {}

    def visit(i: int, trail: frozenset[int] = frozenset()) -> int:
        if i not in depth:
            if i in trail:
                raise ValueError(f"cycle in the lineage at candidate {i}")
            ps = result.parents[i]
            depth[i] = 0 if not ps else 1 + max(visit(int(p), trail | {i}) for p in ps)
        return depth[i]

    return [visit(i) for i in range(len(result.candidates))]


# -- tables for people ------------------------------------------------------------------------------------

def markdown_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table; every cell is made safe (`untrusted.md_cell`: one line, `|` escaped, no live HTML,
    links or images, hidden characters visible), so LM-written text such as a proposal's reason can be a cell."""
    def cell(v: Any) -> str:
        return md_cell(f"{v:.3f}" if isinstance(v, float) else str(v))

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def routing_markdown(table: RoutingTable) -> str:
    slots = sorted({s for c in table.values() for s in c}, key=_slot_key)
    per_label, overall = majority_mapping_agreement(table)
    mapping = slot_majority(table)
    rows = [[label] + [counts.get(s, 0) for s in slots] + [f"{per_label[label]:.1f}%"]
            for label, counts in table.items()]
    text = markdown_table(["family"] + [slot_label(s) for s in slots] + ["agreement"], rows)
    text += "\n\nMajority mapping: " + ", ".join(f"{slot_label(s)} → {lab}" for s, lab in mapping.items())
    return text + f"\n\nOverall agreement: **{overall:.1f}%**"


def library_markdown(library: Library, title: str = "Library") -> str:
    """A library for people: LM-written text in fences longer than any backtick run inside it, hidden
    characters written visibly."""
    lines = [f"### {md_text(title)}", "", "**Router instruction**", "", md_fence(library.router, "text"), ""]
    active = library.active_ids()
    if not active:
        lines.append("_No active slots: every request goes to the fallback._")
    for k in active:
        slot = library.slot(k)
        lines += [f"#### Slot {k} — profile {md_code(slot.profile)}", "", md_fence(slot.description, "text"), "",
                  md_fence(slot.program_source.rstrip() or "# (empty program)", "python"), ""]
    return "\n".join(lines)


def proposals_by_action(result: AdaptiveGEPAResult) -> list[list[Any]]:
    """[action, proposed, accepted, acceptance %] rows from `action_counts`, plus skips."""
    rows = [[a, c["proposed"], c["accepted"], f"{100.0 * c['accepted'] / c['proposed']:.0f}%" if c["proposed"] else "-"]
            for a, c in result.action_counts.items()]
    skips = sum(1 for p in result.proposals if p.get("kind") == "skip")
    if skips:
        rows.append(["(skip)", skips, 0, "-"])
    stale = sum(1 for p in result.proposals if p.get("kind") == "stale")
    if stale:
        rows.append(["(stopped: parent superseded)", stale, 0, "-"])
    return rows


def proposal_rows(result: AdaptiveGEPAResult) -> list[list[Any]]:
    """One row per proposal: iteration, kind, action, slot, parents, parent_sum, child_sum, accepted, child, reason."""
    def num(v: Any) -> Any:
        return "-" if v is None else v

    return [[p.get("iteration"), p.get("kind"), p.get("action") or "-", num(p.get("slot")),
             ",".join(map(str, p.get("parents") or ())) or "-", num(p.get("parent_sum")), num(p.get("child_sum")),
             "yes" if p.get("accepted") else "no", num(p.get("child_index")), p.get("reason") or ""]
            for p in result.proposals]


PROPOSAL_HEADERS = ["iter", "kind", "action", "slot", "parents", "parent_sum", "child_sum", "accepted", "child",
                    "reason"]
