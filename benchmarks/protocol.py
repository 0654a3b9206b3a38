"""Is the gain real? Paired statistics between finished benchmark runs (reference 001 §3.4-4.6).

    python -m benchmarks.protocol RUN_DIR... --reference seed [--out DIR]

Each RUN_DIR is a finished `benchmarks.run --out` directory (results.json), or a directory holding one per
seed (`seed-<n>/results.json`, as `--seeds` writes them). Runs are grouped by method; the reference method's
test rows are paired with every other method's by (seed, request id). For every method against the
reference, per family and overall, per seed and pooled over seeds:

* the two means and the paired difference, with a 95% bootstrap interval (scipy.stats.bootstrap, paired,
  BCa; percentile when BCa cannot be computed);
* a paired test's p-value (Wilcoxon signed-rank, zero differences split; 1.0 when every difference is 0);
* the paired effect size (Cohen's d_z: mean difference / standard deviation of the differences);
* win / tie / loss counts over requests;
* and, for every run, the validation-minus-test gap (the selection optimism the paper names as a limit:
  the best candidate is chosen on the same validation set that reports its score).

It writes protocol.md, protocol.json and plots: intervals by family, per-seed points, validation vs test.
The statistics are plain functions (`paired_stats`, `compare_methods`) for use on any paired scores.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

OVERALL = "overall"
POOLED = "pooled"


@dataclass(frozen=True)
class PairedStats:
    """A method against the reference on the same requests."""

    n: int
    reference_mean: float
    method_mean: float
    diff: float                 # method - reference
    ci_low: float
    ci_high: float
    p_value: float
    effect_size: float | None   # Cohen's d_z; None when every difference is the same nonzero value (sd 0)
    wins: int
    ties: int
    losses: int

    @property
    def significant(self) -> bool:
        return self.ci_low > 0 or self.ci_high < 0


def paired_stats(reference: Sequence[float], method: Sequence[float], *, confidence: float = 0.95,
                 n_resamples: int = 9999, seed: int = 0, tie_tolerance: float = 1e-9) -> PairedStats:
    """Paired statistics of `method` against `reference` (same requests, same order)."""
    from scipy import stats

    a, b = np.asarray(reference, dtype=float), np.asarray(method, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired scores need two equal-length lists, got {a.shape} and {b.shape}")
    n = len(a)
    if n == 0:
        raise ValueError("no paired requests")
    d = b - a
    diff = float(d.mean())
    wins, losses = int((d > tie_tolerance).sum()), int((d < -tie_tolerance).sum())
    constant = n < 2 or bool(np.allclose(d, d[0]))
    if constant:
        low = high = diff
    else:
        def mean_diff(x, y, axis=-1):
            return np.mean(y - x, axis=axis)

        kwargs = dict(paired=True, vectorized=True, confidence_level=confidence, n_resamples=n_resamples,
                      random_state=np.random.default_rng(seed))
        try:
            ci = stats.bootstrap((a, b), mean_diff, method="BCa", **kwargs).confidence_interval
            if not (math.isfinite(ci.low) and math.isfinite(ci.high)):
                raise ValueError("degenerate BCa interval")
        except (ValueError, FloatingPointError):
            ci = stats.bootstrap((a, b), mean_diff, method="percentile", **kwargs).confidence_interval
        low, high = float(ci.low), float(ci.high)
    if not np.any(np.abs(d) > tie_tolerance):
        p = 1.0
    else:
        p = float(stats.wilcoxon(d, zero_method="zsplit").pvalue)
    if constant:      # no spread: d_z is undefined unless there is no difference at all
        effect = 0.0 if abs(diff) <= tie_tolerance else None
    else:
        effect = diff / float(d.std(ddof=1))
    return PairedStats(n, float(a.mean()), float(b.mean()), diff, low, high, p, effect, wins, n - wins - losses,
                       losses)


# -- runs --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """One finished benchmark run: its method, seed, test scores per request and best validation score."""

    path: str
    method: str
    seed: int
    scores: dict[str, float]          # request id -> test score
    families: dict[str, str]          # request id -> family
    best_val: float | None

    @property
    def test_mean(self) -> float:
        return float(np.mean(list(self.scores.values()))) if self.scores else float("nan")


def load_run(path: str | Path) -> Run:
    path = Path(path)
    file = path / "results.json"
    if not file.is_file():
        raise FileNotFoundError(f"{file} not found: is {path} a finished `benchmarks.run --out` directory?")
    res = json.loads(file.read_text(encoding="utf-8"))
    rows = res.get("test") or []
    extra = (res.get("search") or {}).get("extra") or {}
    best_val = extra.get("best_val")
    return Run(str(path), str(res.get("method")), int((res.get("config") or {}).get("seed", 0)),
               {str(r["id"]): float(r["score"]) for r in rows}, {str(r["id"]): str(r["family"]) for r in rows},
               float(best_val) if isinstance(best_val, (int, float)) else None)


def find_runs(dirs: Sequence[str | Path]) -> list[Run]:
    """Every run under `dirs`: a run directory itself, or its `seed-<n>/` subdirectories."""
    runs: list[Run] = []
    for d in dirs:
        d = Path(d)
        if (d / "results.json").is_file():
            runs.append(load_run(d))
            continue
        seeds = sorted(p for p in d.glob("seed-*") if (p / "results.json").is_file())
        if not seeds:
            raise FileNotFoundError(f"{d}: no results.json in it or in any seed-<n>/ below it")
        runs += [load_run(p) for p in seeds]
    return runs


def compare_methods(runs: Sequence[Run], reference: str, **stats_kwargs: Any) -> dict[str, Any]:
    """{method: {family or "overall": {seed or "pooled": PairedStats}}} against `reference`."""
    by_method: dict[str, dict[int, Run]] = {}
    for r in runs:
        if r.seed in by_method.setdefault(r.method, {}):
            raise ValueError(f"two {r.method} runs with seed {r.seed}: {by_method[r.method][r.seed].path} and "
                             f"{r.path}")
        by_method[r.method][r.seed] = r
    if reference not in by_method:
        raise ValueError(f"--reference {reference}: no run of that method among {sorted(by_method)}")
    ref = by_method[reference]
    out: dict[str, Any] = {}
    for method, seeds in sorted(by_method.items()):
        if method == reference:
            continue
        pairs: dict[str, dict[Any, tuple[list[float], list[float]]]] = {}
        for seed, run in sorted(seeds.items()):
            if seed not in ref:
                continue
            base = ref[seed]
            for rid in sorted(set(run.scores) & set(base.scores)):
                for fam in (run.families[rid], OVERALL):
                    for key in (seed, POOLED):
                        a, b = pairs.setdefault(fam, {}).setdefault(key, ([], []))
                        a.append(base.scores[rid])
                        b.append(run.scores[rid])
        out[method] = {fam: {key: paired_stats(a, b, **stats_kwargs) for key, (a, b) in keyed.items()}
                       for fam, keyed in sorted(pairs.items(), key=lambda kv: (kv[0] == OVERALL, kv[0]))}
    return out


def selection_gaps(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Every run's best validation score, test mean and their gap (validation - test)."""
    return [{"method": r.method, "seed": r.seed, "path": r.path, "best_val": r.best_val, "test": r.test_mean,
             "gap": None if r.best_val is None else r.best_val - r.test_mean} for r in runs]


# -- report ------------------------------------------------------------------------------------------------

def _fmt(x: float) -> str:
    return f"{x:+.3f}"


def render(comparison: Mapping[str, Any], gaps: Sequence[Mapping[str, Any]], reference: str) -> str:
    lines = [f"# Is the gain real? (reference: {reference})", "",
             "Paired by request: difference = method - reference, 95% bootstrap interval (BCa), Wilcoxon "
             "signed-rank p, Cohen's d_z, wins/ties/losses. An interval that excludes 0 is marked *.", ""]
    for method, fams in comparison.items():
        lines += [f"## {method}", "", "| family | seed | n | reference | method | diff | 95% CI | p | d_z | W/T/L |",
                  "|---|---|---:|---:|---:|---:|---|---:|---:|---|"]
        for fam, keyed in fams.items():
            for key, s in sorted(keyed.items(), key=lambda kv: (kv[0] == POOLED, str(kv[0]))):
                star = " *" if s.significant else ""
                lines.append(f"| {fam} | {key} | {s.n} | {s.reference_mean:.3f} | {s.method_mean:.3f} | "
                             f"{_fmt(s.diff)}{star} | [{_fmt(s.ci_low)}, {_fmt(s.ci_high)}] | {s.p_value:.3g} | "
                             f"{'—' if s.effect_size is None else f'{s.effect_size:+.2f}'} | "
                             f"{s.wins}/{s.ties}/{s.losses} |")
        lines.append("")
    lines += ["## Selection optimism: validation - test", "",
              "| method | seed | best validation | test | gap |", "|---|---:|---:|---:|---:|"]
    for g in gaps:
        val = "—" if g["best_val"] is None else f"{g['best_val']:.3f}"
        gap = "—" if g["gap"] is None else _fmt(g["gap"])
        lines.append(f"| {g['method']} | {g['seed']} | {val} | {g['test']:.3f} | {gap} |")
    return "\n".join(lines) + "\n"


def plot(comparison: Mapping[str, Any], gaps: Sequence[Mapping[str, Any]], out: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * sum(len(f) for f in comparison.values())))
    labels, y = [], 0
    for method, fams in comparison.items():
        for fam, keyed in fams.items():
            s = keyed[POOLED]
            ax.errorbar(s.diff, y, xerr=[[s.diff - s.ci_low], [s.ci_high - s.diff]], fmt="o", capsize=3,
                        color="#2f6db3" if s.significant else "#888888")
            labels.append(f"{method} · {fam}")
            y += 1
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("paired difference vs reference (95% CI, pooled over seeds)")
    fig.tight_layout()
    paths.append(out / "intervals.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, (method, fams) in enumerate(comparison.items()):
        per_seed = [(k, s.diff) for k, s in fams.get(OVERALL, {}).items() if k != POOLED]
        ax.scatter([i] * len(per_seed), [d for _, d in per_seed], label=method)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(comparison)), list(comparison))
    ax.set_ylabel("overall paired difference, per seed")
    fig.tight_layout()
    paths.append(out / "per_seed.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(4.5, 4))
    shown = [g for g in gaps if g["best_val"] is not None]
    for g in shown:
        ax.scatter(g["best_val"], g["test"])
        ax.annotate(f"{g['method']}/{g['seed']}", (g["best_val"], g["test"]), fontsize=7)
    lim = [0, 1]
    ax.plot(lim, lim, color="black", lw=0.8)
    ax.set_xlabel("best validation score")
    ax.set_ylabel("test score")
    fig.tight_layout()
    paths.append(out / "val_vs_test.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def to_json(comparison: Mapping[str, Any], gaps: Sequence[Mapping[str, Any]], reference: str) -> dict[str, Any]:
    return {"reference": reference, "gaps": list(gaps),
            "comparison": {m: {f: {str(k): {**asdict(s), "significant": s.significant} for k, s in keyed.items()}
                               for f, keyed in fams.items()} for m, fams in comparison.items()}}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.protocol", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="finished benchmarks.run --out directories")
    p.add_argument("--reference", default="seed", help="the method every other is compared with (default seed)")
    p.add_argument("--out", default=None, help="where protocol.md, protocol.json and the plots go "
                   "(default: the first RUN_DIR's parent)")
    p.add_argument("--resamples", type=int, default=9999, help="bootstrap resamples (default 9999)")
    args = p.parse_args(argv)
    try:
        runs = find_runs(args.runs)
        comparison = compare_methods(runs, args.reference, n_resamples=args.resamples)
    except (FileNotFoundError, ValueError) as e:
        p.exit(2, f"{p.prog}: error: {e}\n")
    gaps = selection_gaps(runs)
    out = Path(args.out) if args.out else Path(args.runs[0]).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    text = render(comparison, gaps, args.reference)
    (out / "protocol.md").write_text(text + "\n![intervals](intervals.png) ![per seed](per_seed.png) "
                                     "![validation vs test](val_vs_test.png)\n", encoding="utf-8")
    (out / "protocol.json").write_text(json.dumps(to_json(comparison, gaps, args.reference), indent=1),
                                       encoding="utf-8")
    plot(comparison, gaps, out)
    print(text)
    print(f"[protocol] wrote {out / 'protocol.md'}, protocol.json and 3 plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
