"""Trajectory and item-level diagnostics between two runs (reference 003 §4 and Appendix A.4).

    python -m benchmarks.trajectory RUN_A RUN_B [--out DIR]

Path (each run): every byte-distinct committed library along the lineage of the selected one, in order
(s_0 ... s_T), compared step by step --
  normalised edit   Lev(s_{t-1}, s_t) / max(|s_{t-1}|, |s_t|, 1), token-level Levenshtein (rapidfuzz)
  section breadth   the fraction of sections in the union of two adjacent states whose text changed or that
                    were added or removed (sections: the router, and each active slot's description, program
                    and profile)
  churn             1 - Lev(s_0, s_T) / max(sum_t Lev(s_{t-1}, s_t), 1): how much stepwise editing did not
                    survive into the final state
Behaviour (the two selected programs on test, with the seed's as s_0): pass/fail agreement, correct-set
Jaccard J_C and gain-set Jaccard J_G (gains over the seed's correct set; Jaccard of two empty sets is 1).
A test row counts as correct when its score reaches `--pass-score` (default 1.0).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from rapidfuzz.distance import Levenshtein

Sections = dict[str, str]
_TOKEN = re.compile(r"\w+|[^\w\s]")


def tokens(state: Sections) -> list[str]:
    """A state's token sequence: each section's name, then its text's tokens, in section order."""
    out: list[str] = []
    for name in sorted(state):
        out.append(f"§{name}")
        out += _TOKEN.findall(state[name])
    return out


def library_sections(library: Mapping[str, Any]) -> Sections:
    """A library (its `to_dict()` form) as sections: the router and each active slot's parts."""
    out = {"router": str(library.get("router", ""))}
    for k, slot in enumerate(library.get("slots") or [], start=1):
        if isinstance(slot, Mapping) and slot.get("active"):
            out[f"slot{k}.description"] = str(slot.get("description", ""))
            out[f"slot{k}.program"] = str(slot.get("program_source", slot.get("program", "")))
            out[f"slot{k}.profile"] = str(slot.get("profile", ""))
    return out


def normalised_edit(a: Sections, b: Sections) -> float:
    ta, tb = tokens(a), tokens(b)
    return Levenshtein.distance(ta, tb) / max(len(ta), len(tb), 1)


def section_breadth(a: Sections, b: Sections) -> float:
    names = set(a) | set(b)
    if not names:
        return 0.0
    return sum(1 for n in names if a.get(n) != b.get(n)) / len(names)


def churn(states: Sequence[Sections]) -> float:
    if len(states) < 2:
        return 0.0
    steps = sum(Levenshtein.distance(tokens(x), tokens(y)) for x, y in zip(states, states[1:]))
    return 1.0 - Levenshtein.distance(tokens(states[0]), tokens(states[-1])) / max(steps, 1)


def distinct(states: Sequence[Sections]) -> list[Sections]:
    """Byte-distinct states in order (a state equal to the one before it is dropped)."""
    out: list[Sections] = []
    for s in states:
        if not out or s != out[-1]:
            out.append(s)
    return out


def path_metrics(states: Sequence[Sections]) -> dict[str, Any]:
    states = distinct(states)
    steps = list(zip(states, states[1:]))
    edits = [normalised_edit(a, b) for a, b in steps]
    breadths = [section_breadth(a, b) for a, b in steps]
    return {"committed_states": len(states), "updates": len(steps), "max_normalised_edit": max(edits, default=0.0),
            "max_section_breadth": max(breadths, default=0.0), "churn": churn(states),
            "normalised_edits": edits, "section_breadths": breadths}


def jaccard(a: set, b: set) -> float:
    return 1.0 if not a and not b else len(a & b) / len(a | b)


def item_metrics(initial: set[str], a: set[str], b: set[str], items: set[str]) -> dict[str, float]:
    """Agreement, J_C and J_G of two correct-item sets `a`, `b` over `items`, gains relative to `initial`."""
    agree = sum(1 for i in items if (i in a) == (i in b)) / len(items) if items else 1.0
    return {"agreement": agree, "behaviour_distance": 1.0 - agree, "J_C": jaccard(a, b),
            "J_G": jaccard(a - initial, b - initial)}


# -- reading runs --------------------------------------------------------------------------------------------

def checkpoint_states(run: Mapping[str, Any]) -> list[Sections]:
    """An OEO run.json: the selected checkpoint's chain of committed revisions, in commit order."""
    by_index = {cp["index"]: cp for cp in run["checkpoints"]}
    chain, cur = [], run["selected"]
    while cur is not None:
        chain.append(by_index[cur])
        cur = by_index[cur]["parent"]
    return [library_sections(cp["library"]) for cp in reversed(chain)]


def lineage_states(run: Mapping[str, Any]) -> list[Sections]:
    """AdaptiveGEPA's run.json: the selected candidate's ancestors and itself, in discovery order."""
    if "checkpoints" in run and "turns" in run:
        return checkpoint_states(run)
    parents = run["parents"]
    best = run["best_idx"]
    seen, stack = {best}, [best]
    while stack:
        for p in parents[stack.pop()] or ():
            if p is not None and p not in seen:
                seen.add(p)
                stack.append(p)
    return [library_sections(run["candidates"][i]) for i in sorted(seen)]


def run_states(run_dir: Path) -> list[Sections]:
    """The committed path of a benchmark run: AdaptiveGEPA's lineage from search/run.json; otherwise the seed
    (an empty library) and the final program or library."""
    record = run_dir / "search" / "run.json"
    if record.is_file():
        return lineage_states(json.loads(record.read_text(encoding="utf-8")))
    res = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    spec = res.get("spec") or {}
    start: Sections = {}
    if "library" in spec:
        from dspy_adaptive import Library
        start = library_sections(Library.empty(len(spec["library"].get("slots") or [])).to_dict())
        return [start, library_sections(spec["library"])]
    if "module_src" in spec:
        return [start, {"program": spec["module_src"]}]
    if "module_srcs" in spec:
        return [start, {f"{k}.program": v for k, v in spec["module_srcs"].items()}]
    return [start]


def correct_set(run_dir: Path, pass_score: float) -> tuple[set[str], set[str]]:
    rows = json.loads((run_dir / "results.json").read_text(encoding="utf-8")).get("test") or []
    return {str(r["id"]) for r in rows if float(r["score"]) >= pass_score - 1e-9}, {str(r["id"]) for r in rows}


def compare_runs(a: Path, b: Path, seed_run: Path | None, pass_score: float = 1.0) -> dict[str, Any]:
    ca, items_a = correct_set(a, pass_score)
    cb, items_b = correct_set(b, pass_score)
    c0 = correct_set(seed_run, pass_score)[0] if seed_run else set()
    sa, sb = run_states(a), run_states(b)
    return {"runs": [str(a), str(b)], "seed_run": str(seed_run) if seed_run else None,
            "path": {str(a): path_metrics(sa), str(b): path_metrics(sb)},
            "final_text_distance": normalised_edit(sa[-1], sb[-1]),
            "items": item_metrics(c0, ca, cb, items_a & items_b)}


def render(report: Mapping[str, Any]) -> str:
    a, b = report["runs"]
    lines = ["# Trajectory and item-level diagnostics", "",
             "| run | committed states | updates | max normalised edit | max section breadth | churn |",
             "|---|---:|---:|---:|---:|---:|"]
    for name in (a, b):
        p = report["path"][name]
        lines.append(f"| {name} | {p['committed_states']} | {p['updates']} | {p['max_normalised_edit']:.3f} | "
                     f"{p['max_section_breadth']:.3f} | {p['churn']:.3f} |")
    i = report["items"]
    lines += ["", f"Final-text distance {report['final_text_distance']:.3f}; pass/fail agreement {i['agreement']:.3f} "
                  f"(behaviour distance {i['behaviour_distance']:.3f}); J_C {i['J_C']:.3f}; J_G {i['J_G']:.3f}"
                  + ("" if report["seed_run"] else " (no --seed-run: gains are over an empty set)") + "."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.trajectory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs=2, metavar="RUN_DIR", help="two finished benchmarks.run --out directories")
    p.add_argument("--seed-run", help="the seed method's run directory (the initial correct set for J_G)")
    p.add_argument("--pass-score", type=float, default=1.0, help="a test row is correct at this score (default 1)")
    p.add_argument("--out", help="where trajectory.md and trajectory.json go (default: print only)")
    args = p.parse_args(argv)
    dirs = [Path(d) for d in args.runs] + ([Path(args.seed_run)] if args.seed_run else [])
    for d in dirs:
        if not (d / "results.json").is_file():
            p.exit(2, f"{p.prog}: error: {d}/results.json not found: give finished benchmarks.run --out "
                      "directories\n")
    report = compare_runs(dirs[0], dirs[1], Path(args.seed_run) if args.seed_run else None, args.pass_score)
    text = render(report)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "trajectory.md").write_text(text, encoding="utf-8")
        (out / "trajectory.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
