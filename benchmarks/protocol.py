"""Is the gain real? Paired statistics between finished benchmark runs (reference 001 §3.4-4.6).

    python -m benchmarks.protocol RUN_DIR... --reference LABEL [--out DIR]
    python -m benchmarks.protocol runs/adaptive runs/adaptive-scalar --reference adaptive   # the feedback ablation
    python -m benchmarks.protocol runs/seed mine=runs/adaptive-k3 --reference seed         # a name of your own

Each RUN_DIR is a finished `benchmarks.run --out` directory (results.json), or a directory holding one per
seed (`seed-<n>/results.json`, as `--seeds` writes them); `NAME=RUN_DIR` gives its runs a name of your own.
Runs are labelled by their method; where one method ran in more than one configuration (feedback, selection
split, budget, K, sizes, ...), each configuration's label adds what differs from the others, leaving out values
at the runner's default: `adaptive` and `adaptive[feedback=scalar]`. `--reference` takes a label or one of the
RUN_DIRs. The reference's test rows are paired with every other label's by (seed, request id); requests or
seeds present in only one of the two are counted and reported with the reason, never dropped silently, and a
request id repeated inside one run is refused. For every label against the reference, per family and overall,
per seed and pooled over seeds, `dspy_adaptive.record.paired.paired_comparison` gives:

* the two means and the paired difference, with a 95% bootstrap interval (scipy.stats.bootstrap, paired,
  BCa; percentile when BCa cannot be computed);
* a paired test's p-value (Wilcoxon signed-rank, zero differences split; 1.0 when every difference is 0);
* the paired effect size (Cohen's d_z; undefined when the differences have no spread, all 0 included);
* win / tie / loss counts over requests;
* "too small" instead of an interval below the minimum number of pairs (`--min-pairs`, default 6 at 95%);
* and, for every run, the validation-minus-test gap (the selection optimism the paper names as a limit:
  the best candidate is chosen on the same validation set that reports its score).

It writes protocol.md, protocol.json and plots: intervals by family, per-seed points, validation vs test.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from dspy_adaptive.record.paired import PairedComparison, paired_comparison, smallest_testable_n

OVERALL = "overall"
POOLED = "pooled"
#: config keys that say which requests a run was tested on (a difference there explains unpaired requests)
TEST_SET_KEYS = ("data", "sizes")

# the one statistics routine, under the names earlier callers used
PairedStats = PairedComparison
paired_stats = paired_comparison


# -- runs --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """One finished benchmark run: its method, seed, configuration, test scores per request and best
    validation score. `label` is what the report calls it (see `label_runs`); `name` a user-given one."""

    path: str
    method: str
    seed: int
    scores: dict[str, float]          # request id -> test score
    families: dict[str, str]          # request id -> family
    best_val: float | None
    config: dict[str, Any] = field(default_factory=dict)   # the run's configuration without its seed
    name: str | None = None
    source: str = ""                  # the RUN_DIR argument it was found under
    label: str = ""

    @property
    def test_mean(self) -> float:
        return float(np.mean(list(self.scores.values()))) if self.scores else float("nan")


def load_run(path: str | Path, name: str | None = None, source: str | None = None) -> Run:
    """A run from its results.json; a request id listed twice in its test rows is refused."""
    path = Path(path)
    file = path / "results.json"
    if not file.is_file():
        raise FileNotFoundError(f"{file} not found: is {path} a finished `benchmarks.run --out` directory?")
    res = json.loads(file.read_text(encoding="utf-8"))
    scores: dict[str, float] = {}
    families: dict[str, str] = {}
    for row in res.get("test") or []:
        rid = str(row["id"])
        if rid in scores:
            raise ValueError(f"{file}: request {rid} is listed twice in the test rows (one run scores each request "
                             "once); the file was edited or merged by hand -- rerun that run's test phase "
                             "(delete its phases/test.json and rerun the same command)")
        scores[rid], families[rid] = float(row["score"]), str(row["family"])
    config = dict(res.get("config") or {})
    seed = int(config.pop("seed", 0))
    data = config.get("data")
    if isinstance(data, str) and data != "hf" and Path(data).is_dir():
        config["data"] = str(Path(data).resolve())     # one directory, however a run spelled it from here
    best_val = ((res.get("search") or {}).get("extra") or {}).get("best_val")
    method = str(res.get("method"))
    return Run(str(path), method, seed, scores, families, float(best_val) if isinstance(best_val, (int, float))
               else None, config, name, str(source if source is not None else path), name or method)


def parse_run_arg(text: str) -> tuple[str | None, str]:
    """`RUN_DIR` or `NAME=RUN_DIR` -> (name or None, directory). An existing directory is never split."""
    if "=" in text and not Path(text).exists():
        name, _, directory = text.partition("=")
        if not name.strip() or not directory:
            raise ValueError(f"{text!r}: give RUN_DIR or NAME=RUN_DIR")
        return name.strip(), directory
    return None, text


def find_runs(dirs: Sequence[str | Path]) -> list[Run]:
    """Every run under `dirs` (each `RUN_DIR` or `NAME=RUN_DIR`): a run directory itself, or its `seed-<n>/`
    subdirectories; labelled with `label_runs`."""
    runs: list[Run] = []
    seen: set[Path] = set()
    for arg in dirs:
        name, d = parse_run_arg(str(arg))
        d = Path(d)
        if (d / "results.json").is_file():
            found = [d]
        else:
            found = sorted(p for p in d.glob("seed-*") if (p / "results.json").is_file())
            if not found:
                raise FileNotFoundError(f"{d}: no results.json in it or in any seed-<n>/ below it")
        for p in found:
            if p.resolve() not in seen:          # the same directory given twice is one run
                seen.add(p.resolve())
                runs.append(load_run(p, name, str(arg)))
    return label_runs(runs)


# -- labels ------------------------------------------------------------------------------------------------

def runner_defaults() -> dict[str, Any]:
    """The configuration values `benchmarks.run` uses when a flag is not given (labels leave them out)."""
    from benchmarks.run import DEFAULT_MINIBATCH, build_parser
    defaults = vars(build_parser().parse_args([]))
    # keys config_of writes only when set, or computes
    defaults.update(feedback="decomposed", sizes="paper", minibatch_size=DEFAULT_MINIBATCH)
    return defaults


#: list-valued configuration keys, shown in labels as the flags they hold
EXPANDED = {"selection": ("selection_split", "finalists", "selection_rollouts")}


def expanded(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run's configuration with list-valued keys spread into the flags they hold (labels name flags)."""
    out = {k: v for k, v in config.items() if k not in EXPANDED}
    for key, names in EXPANDED.items():
        value = config.get(key)
        if isinstance(value, (list, tuple)) and len(value) == len(names):
            out.update(zip(names, value))
    return out


def _key(config: Mapping[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def format_value(value: Any) -> str:
    """A configuration value as a label shows it: lists joined by commas, per-family sizes compactly."""
    if isinstance(value, Mapping):
        values = list(value.values())
        if values and all(v == values[0] for v in values):
            return format_value(values[0])
        return ";".join(f"{k}:{format_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ",".join(format_value(v) for v in value)
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def differences(configs: Sequence[Mapping[str, Any]], defaults: Mapping[str, Any]) -> list[dict[str, Any]]:
    """For each configuration, the keys whose values differ among `configs` and that it does not leave at the
    default ({key: value}); a key missing from a configuration counts as its default."""
    keys = sorted({k for c in configs for k in c})
    full = [{k: c.get(k, defaults.get(k)) for k in keys} for c in configs]
    varying = [k for k in keys if len({_key({"v": c[k]}) for c in full}) > 1]
    return [{k: c[k] for k in varying if _key({"v": c[k]}) != _key({"v": defaults.get(k)})} for c in full]


def label_runs(runs: Sequence[Run], defaults: Mapping[str, Any] | None = None) -> list[Run]:
    """Labels: a user-given name, else the method, plus `[key=value,...]` where the method ran in more than one
    configuration (what differs, values at the runner's default left out). Refuses a label naming two
    configurations and two runs of one label with the same seed."""
    out = list(runs)
    by_method: dict[str, list[int]] = {}
    for i, r in enumerate(out):
        if r.name:
            out[i] = replace(r, label=r.name)
        else:
            by_method.setdefault(r.method, []).append(i)
    for method, idx in by_method.items():
        configs = {_key(out[i].config): expanded(out[i].config) for i in idx}
        if len(configs) == 1:
            for i in idx:
                out[i] = replace(out[i], label=method)
            continue
        defaults = runner_defaults() if defaults is None else defaults
        diff = dict(zip(configs, differences(list(configs.values()), defaults)))
        for i in idx:
            parts = diff[_key(out[i].config)]
            suffix = ",".join(f"{k}={format_value(v)}" for k, v in parts.items())
            out[i] = replace(out[i], label=f"{method}[{suffix}]" if suffix else method)
    _check_labels(out)
    return out


def _check_labels(runs: Sequence[Run]) -> None:
    by_label: dict[str, list[Run]] = {}
    for r in runs:
        by_label.setdefault(r.label, []).append(r)
    for label, group in by_label.items():
        kinds = {(r.method, _key(r.config)) for r in group}
        if len(kinds) > 1:
            a, b = group[0], next(r for r in group if (r.method, _key(r.config)) != (group[0].method,
                                                                                    _key(group[0].config)))
            what = f"methods {a.method} and {b.method}" if a.method != b.method else "configurations " + "; ".join(
                f"{k}: {format_value(a.config.get(k))} vs {format_value(b.config.get(k))}"
                for k in sorted(set(a.config) | set(b.config)) if a.config.get(k) != b.config.get(k))
            raise ValueError(f"the label {label!r} names runs that differ ({what}): {a.path} and {b.path}; give "
                             "each its own name with NAME=RUN_DIR")
        seeds: dict[int, Run] = {}
        for r in group:
            if r.seed in seeds:
                raise ValueError(f"two runs labelled {label} with seed {r.seed} and the same configuration: "
                                 f"{seeds[r.seed].path} and {r.path}; give them different names (NAME=RUN_DIR) "
                                 "to compare them, or leave one out")
            seeds[r.seed] = r


def labels(runs: Sequence[Run]) -> list[str]:
    return sorted({r.label for r in runs})


def resolve_reference(runs: Sequence[Run], reference: str) -> str:
    """The label `reference` names: a label, or one of the RUN_DIR arguments (its runs' single label)."""
    known = labels(runs)
    if reference in known:
        return reference
    target = Path(parse_run_arg(reference)[1]).resolve()
    under = {r.label for r in runs if Path(parse_run_arg(r.source)[1]).resolve() == target
             or Path(r.path).resolve() == target}
    if len(under) == 1:
        return under.pop()
    raise ValueError(f"--reference {reference}: no run has that label or directory; labels: {', '.join(known)} "
                     "(labels are the method, plus what differs where one method ran in several configurations)")


# -- pairing -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Unpaired:
    """Requests of one seed that could not be paired, and why."""

    seed: int
    only_reference: int      # requests in the reference run only
    only_method: int         # requests in the compared run only
    why: str


@dataclass(frozen=True)
class Pairing:
    """A label against the reference: the paired scores per family and seed, and what could not be paired."""

    label: str
    reference: str
    pairs: dict[str, dict[Any, tuple[list[float], list[float]]]]   # family -> seed | POOLED -> (ref, method)
    unpaired: list[Unpaired]

    @property
    def n(self) -> int:
        return len(self.pairs.get(OVERALL, {}).get(POOLED, ([], []))[0])

    @property
    def dropped(self) -> int:
        return sum(u.only_reference + u.only_method for u in self.unpaired)


def _why_unpaired(base: Run, run: Run) -> str:
    keys = [k for k in TEST_SET_KEYS if base.config.get(k) != run.config.get(k)]
    if keys:
        return "the two runs were tested on different requests: their " + " and ".join(keys) + " differ (" + \
            "; ".join(f"{k} {format_value(base.config.get(k))} vs {format_value(run.config.get(k))}" for k in keys) \
            + ")"
    return "the two runs' test sets differ although their data and sizes agree (different data files?)"


def pair_runs(runs: Sequence[Run], reference: str) -> dict[str, Pairing]:
    """Every other label against `reference`, paired by (seed, request id)."""
    by_label: dict[str, dict[int, Run]] = {}
    for r in runs:
        by_label.setdefault(r.label, {})[r.seed] = r
    if reference not in by_label:
        raise ValueError(f"--reference {reference}: no run of that label among {sorted(by_label)}")
    ref = by_label[reference]
    out: dict[str, Pairing] = {}
    for label, seeds in sorted(by_label.items()):
        if label == reference:
            continue
        pairs: dict[str, dict[Any, tuple[list[float], list[float]]]] = {}
        unpaired: list[Unpaired] = []
        for seed in sorted(set(seeds) | set(ref)):
            run, base = seeds.get(seed), ref.get(seed)
            if run is None or base is None:
                missing = label if run is None else reference
                only_ref, only_run = (len(base.scores), 0) if run is None else (0, len(run.scores))
                unpaired.append(Unpaired(seed, only_ref, only_run, f"no {missing} run with seed {seed}"))
                continue
            only_ref, only_run = set(base.scores) - set(run.scores), set(run.scores) - set(base.scores)
            if only_ref or only_run:
                unpaired.append(Unpaired(seed, len(only_ref), len(only_run), _why_unpaired(base, run)))
            for rid in sorted(set(run.scores) & set(base.scores)):
                if run.families[rid] != base.families[rid]:
                    raise ValueError(f"request {rid} is {base.families[rid]} in {base.path} but "
                                     f"{run.families[rid]} in {run.path}: these runs did not load the same data")
                for fam in (run.families[rid], OVERALL):
                    for key in (seed, POOLED):
                        a, b = pairs.setdefault(fam, {}).setdefault(key, ([], []))
                        a.append(base.scores[rid])
                        b.append(run.scores[rid])
        ordered = dict(sorted(pairs.items(), key=lambda kv: (kv[0] == OVERALL, kv[0])))
        out[label] = Pairing(label, reference, ordered, unpaired)
    if not out:
        raise ValueError(f"nothing to compare with {reference}: give runs of at least one other label")
    return out


def compare_pairings(pairings: Mapping[str, Pairing], **stats_kwargs: Any) -> dict[str, Any]:
    """{label: {family or "overall": {seed or "pooled": PairedComparison}}}."""
    return {label: {fam: {key: paired_comparison(a, b, **stats_kwargs) for key, (a, b) in keyed.items()}
                    for fam, keyed in p.pairs.items()} for label, p in pairings.items()}


def compare_methods(runs: Sequence[Run], reference: str, **stats_kwargs: Any) -> dict[str, Any]:
    """`compare_pairings(pair_runs(...))` for runs as `find_runs` labels them (`reference`: a label or RUN_DIR)."""
    return compare_pairings(pair_runs(runs, resolve_reference(runs, reference)), **stats_kwargs)


def selection_gaps(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Every run's best validation score, test mean and their gap (validation - test)."""
    return [{"label": r.label, "method": r.method, "seed": r.seed, "path": r.path, "best_val": r.best_val,
             "test": r.test_mean, "gap": None if r.best_val is None else r.best_val - r.test_mean} for r in runs]


# -- report ------------------------------------------------------------------------------------------------

def _fmt(x: float) -> str:
    return f"{x:+.3f}"


def _unpaired_lines(p: Pairing) -> list[str]:
    if not p.unpaired:
        return [f"Every request of every seed paired with {p.reference}."]
    lines = [f"Not compared ({p.dropped} requests):"]
    for u in p.unpaired:
        where = [f"{u.only_reference} only in the {p.reference} run" if u.only_reference else "",
                 f"{u.only_method} only in the {p.label} run" if u.only_method else ""]
        lines.append(f"- seed {u.seed}: {', '.join(w for w in where if w)} -- {u.why}")
    return lines


def render(comparison: Mapping[str, Any], gaps: Sequence[Mapping[str, Any]], reference: str,
           runs: Sequence[Run] = (), pairings: Mapping[str, Pairing] | None = None) -> str:
    example = next((s for fams in comparison.values() for keyed in fams.values() for s in keyed.values()), None)
    minimum = example.min_pairs if example else smallest_testable_n()
    confidence = example.confidence if example else 0.95
    lines = [f"# Is the gain real? (reference: {reference})", "",
             f"Paired by request: difference = run - reference, {confidence:.0%} bootstrap interval (BCa), Wilcoxon "
             "signed-rank p, Cohen's d_z (— where the differences have no spread), wins/ties/losses. A difference "
             f"is marked * when its interval excludes 0 and the signed-rank test agrees (p < {1 - confidence:.2g}); "
             f"with fewer than {minimum} paired requests a comparison is too small to call either way.", ""]
    if runs:
        lines += ["| label | method | seeds | directories |", "|---|---|---|---|"]
        for label in labels(runs):
            group = sorted((r for r in runs if r.label == label), key=lambda r: r.seed)
            seeds = ", ".join(str(r.seed) for r in group)
            lines.append(f"| {label} | {group[0].method} | {seeds} | {', '.join(sorted({r.source for r in group}))} |")
        lines += ["", "Labels: the method, plus what differs where one method ran in more than one configuration "
                      "(values at `benchmarks.run`'s defaults left out), or a name given as NAME=RUN_DIR.", ""]
    for label, fams in comparison.items():
        lines += [f"## {label}", ""]
        if pairings and label in pairings:
            lines += _unpaired_lines(pairings[label]) + [""]
        if not fams:
            lines += ["No paired requests: nothing to compare.", ""]
            continue
        lines += [f"| family | seed | n | reference | run | diff | {confidence:.0%} CI | p | d_z | W/T/L |",
                  "|---|---|---:|---:|---:|---:|---|---:|---:|---|"]
        for fam, keyed in fams.items():
            for key, s in sorted(keyed.items(), key=lambda kv: (kv[0] == POOLED, str(kv[0]))):
                star = " *" if s.significant else ""
                ci = f"too small (n < {s.min_pairs})" if s.too_small else f"[{_fmt(s.ci_low)}, {_fmt(s.ci_high)}]"
                p = "—" if s.p_value is None else f"{s.p_value:.3g}"
                dz = "—" if s.effect_size is None else f"{s.effect_size:+.2f}"
                lines.append(f"| {fam} | {key} | {s.n} | {s.reference_mean:.3f} | {s.method_mean:.3f} | "
                             f"{_fmt(s.diff)}{star} | {ci} | {p} | {dz} | {s.wins}/{s.ties}/{s.losses} |")
        lines.append("")
    lines += ["## Selection optimism: validation - test", "",
              "| run | seed | best validation | test | gap |", "|---|---:|---:|---:|---:|"]
    for g in gaps:
        val = "—" if g["best_val"] is None else f"{g['best_val']:.3f}"
        gap = "—" if g["gap"] is None else _fmt(g["gap"])
        lines.append(f"| {g.get('label', g['method'])} | {g['seed']} | {val} | {g['test']:.3f} | {gap} |")
    return "\n".join(lines) + "\n"


def plot(comparison: Mapping[str, Any], gaps: Sequence[Mapping[str, Any]], out: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    rows = [(label, fam, keyed[POOLED]) for label, fams in comparison.items() for fam, keyed in fams.items()]
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * max(1, len(rows))))
    for y, (_, _, s) in enumerate(rows):
        if s.too_small:
            ax.plot(s.diff, y, "x", color="#888888")
        else:
            ax.errorbar(s.diff, y, xerr=[[s.diff - s.ci_low], [s.ci_high - s.diff]], fmt="o", capsize=3,
                        color="#2f6db3" if s.significant else "#888888")
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(rows)), [f"{label} · {fam}" for label, fam, _ in rows])
    ax.set_xlabel("paired difference vs reference (95% CI, pooled over seeds; x: too few pairs)")
    fig.tight_layout()
    paths.append(out / "intervals.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, (label, fams) in enumerate(comparison.items()):
        per_seed = [(k, s.diff) for k, s in fams.get(OVERALL, {}).items() if k != POOLED]
        ax.scatter([i] * len(per_seed), [d for _, d in per_seed], label=label)
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
        ax.annotate(f"{g.get('label', g['method'])}/{g['seed']}", (g["best_val"], g["test"]), fontsize=7)
    lim = [0, 1]
    ax.plot(lim, lim, color="black", lw=0.8)
    ax.set_xlabel("best validation score")
    ax.set_ylabel("test score")
    fig.tight_layout()
    paths.append(out / "val_vs_test.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def to_json(comparison: Mapping[str, Any], gaps: Sequence[Mapping[str, Any]], reference: str,
            runs: Sequence[Run] = (), pairings: Mapping[str, Pairing] | None = None) -> dict[str, Any]:
    return {"reference": reference, "gaps": list(gaps),
            "runs": [{"label": r.label, "method": r.method, "seed": r.seed, "path": r.path, "name": r.name}
                     for r in runs],
            "unpaired": {label: [asdict(u) for u in p.unpaired] for label, p in (pairings or {}).items()},
            "comparison": {m: {f: {str(k): s.to_dict() for k, s in keyed.items()} for f, keyed in fams.items()}
                           for m, fams in comparison.items()}}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.protocol", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="finished benchmarks.run --out directories, each optionally NAME=RUN_DIR")
    p.add_argument("--reference", default="seed",
                   help="the label (or RUN_DIR) every other is compared with (default seed)")
    p.add_argument("--out", default=None, help="where protocol.md, protocol.json and the plots go "
                   "(default: the first RUN_DIR's parent)")
    p.add_argument("--resamples", type=int, default=9999, help="bootstrap resamples (default 9999)")
    p.add_argument("--min-pairs", type=int, default=None,
                   help="fewest paired requests a comparison needs (default: the fewest at which a signed-rank test "
                        "can reach p < 0.05, i.e. 6)")
    args = p.parse_args(argv)
    try:
        runs = find_runs(args.runs)
        reference = resolve_reference(runs, args.reference)
        pairings = pair_runs(runs, reference)
        comparison = compare_pairings(pairings, n_resamples=args.resamples, min_pairs=args.min_pairs)
    except (FileNotFoundError, ValueError) as e:
        p.exit(2, f"{p.prog}: error: {e}\n")
    gaps = selection_gaps(runs)
    out = Path(args.out) if args.out else Path(parse_run_arg(args.runs[0])[1]).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    text = render(comparison, gaps, reference, runs, pairings)
    (out / "protocol.md").write_text(text + "\n![intervals](intervals.png) ![per seed](per_seed.png) "
                                     "![validation vs test](val_vs_test.png)\n", encoding="utf-8")
    (out / "protocol.json").write_text(json.dumps(to_json(comparison, gaps, reference, runs, pairings), indent=1),
                                       encoding="utf-8")
    plot(comparison, gaps, out)
    print(text)
    print(f"[protocol] wrote {out / 'protocol.md'}, protocol.json and 3 plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
