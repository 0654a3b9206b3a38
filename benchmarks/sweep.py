"""Sweeps of methods x seeds x budgets, each cell a Ray task (the ray extra).

    python -m benchmarks.sweep --methods seed,adaptive,oeo --seeds 0,1,2 --budgets 2000,18000 --out runs/sweep \\
        [--address ray://head:10001] [--reference seed] -- --data hf --actor-lm ... --reflection-lm ...

Everything after `--` is passed to every `benchmarks.run` cell (data, models, sizes, ...). Each cell
(method, seed, budget) runs `python -m benchmarks.run --method M --seed S --budget B --out
OUT/M/budget-B/seed-S ...` as one Ray task -- on a local Ray by default, on a cluster with `--address`. A
cell whose results.json exists is skipped, and an interrupted cell resumes from its phases, so a killed sweep
is resumed by running the same command again. One progress bar counts finished cells. At the end the sweep
writes sweep.json (every cell and its directory) and, per budget, the protocol report against `--reference`
(OUT/protocol-B/) and the merged tables of the first seed (OUT/compare-B/).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Cell:
    method: str
    seed: int
    budget: int

    def directory(self, out: Path) -> Path:
        return out / self.method / f"budget-{self.budget}" / f"seed-{self.seed}"

    def argv(self, out: Path, extra: Sequence[str]) -> list[str]:
        return ["--method", self.method, "--seed", str(self.seed), "--budget", str(self.budget),
                "--out", str(self.directory(out)), *extra]


def cells(methods: Sequence[str], seeds: Sequence[int], budgets: Sequence[int]) -> list[Cell]:
    return [Cell(m, s, b) for b in budgets for m in methods for s in seeds]


def run_cell(argv: list[str]) -> str:
    """One cell in a Ray worker: benchmarks.run in-process (its output goes to the cell's log)."""
    import contextlib
    out = Path(argv[argv.index("--out") + 1])
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with open(out / "sweep.log", "a", encoding="utf-8") as log, contextlib.redirect_stdout(log), \
            contextlib.redirect_stderr(log):
        from benchmarks.run import main
        main(argv)
    return str(out)


def _ints(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"{option} {text!r}: give comma-separated integers") from None
    if not values or len(set(values)) != len(values):
        raise SystemExit(f"{option} {text!r}: give distinct integers")
    return values


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(prog="python -m benchmarks.sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", required=True, help="comma-separated benchmarks.run methods")
    p.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    p.add_argument("--budgets", required=True, help="comma-separated budgets in scored calls")
    p.add_argument("--out", required=True, help="the sweep directory")
    p.add_argument("--address", default=None, help="a Ray cluster address (default: a local Ray)")
    p.add_argument("--num-cpus", type=int, default=None, help="local Ray: CPUs (default: all)")
    p.add_argument("--reference", default=None, help="the protocol report's reference method (default: the first)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    from benchmarks.run import METHODS
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS) - {"grpo"})
    if unknown:
        raise SystemExit(f"--methods: unknown {unknown}; choose from {', '.join(METHODS)}")
    seeds, budgets = _ints(args.seeds, "--seeds"), _ints(args.budgets, "--budgets")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from dspy_adaptive.search.ray_executor import require_ray
    ray = require_ray()
    if not ray.is_initialized():
        ray.init(address=args.address, num_cpus=args.num_cpus if args.address is None else None,
                 include_dashboard=False, log_to_driver=False)
    todo = cells(methods, seeds, budgets)
    finished = [c for c in todo if (c.directory(out) / "results.json").is_file()]
    pending = [c for c in todo if c not in finished]
    print(f"[sweep] {len(todo)} cells: {len(finished)} finished (skipped), {len(pending)} to run")
    task = ray.remote(num_cpus=1)(run_cell).options(
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                                  "LITELLM_LOCAL_MODEL_COST_MAP": "True"}})
    refs = {task.remote(c.argv(out, extra)): c for c in pending}
    from tqdm.auto import tqdm
    failed: list[tuple[Cell, str]] = []
    with tqdm(total=len(todo), initial=len(finished), desc="sweep", unit="cell", disable=args.no_progress) as bar:
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            cell = refs.pop(ready[0])
            try:
                ray.get(ready[0])
            except Exception as e:  # noqa: BLE001 - one failed cell does not stop the others; rerun to retry it
                failed.append((cell, f"{type(e).__name__}: {str(e)[:300]}"))
            bar.update(1)
    record = {"cells": [asdict(c) | {"dir": str(c.directory(out)),
                                      "finished": (c.directory(out) / "results.json").is_file()} for c in todo],
              "failed": [asdict(c) | {"error": e} for c, e in failed], "extra_args": extra}
    (out / "sweep.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    report(out, methods, budgets, seeds, args.reference or methods[0])
    for c, e in failed:
        print(f"[sweep] FAILED {c}: {e} (log: {c.directory(out) / 'sweep.log'}); rerun the command to retry")
    return 1 if failed else 0


def report(out: Path, methods: Sequence[str], budgets: Sequence[int], seeds: Sequence[int], reference: str) -> None:
    """Per budget: the protocol report over every method's seeds, and the first seed's merged tables."""
    from benchmarks import protocol
    from benchmarks.run import compare
    for b in budgets:
        dirs = [out / m / f"budget-{b}" for m in methods]
        if all(any((d / f"seed-{s}" / "results.json").is_file() for s in seeds) for d in dirs) and \
                reference in methods and len(methods) > 1:
            protocol.main([*map(str, dirs), "--reference", reference, "--out", str(out / f"protocol-{b}")])
        firsts = [d / f"seed-{seeds[0]}" for d in dirs if (d / f"seed-{seeds[0]}" / "results.json").is_file()]
        if firsts:
            compare([str(d) for d in firsts], str(out / f"compare-{b}"))


__all__ = ["Cell", "cells", "main", "report", "run_cell"]

if __name__ == "__main__":
    sys.exit(main())
