"""Command line: `python -m dspy_adaptive.cli demo` (also `adaptive-gepa demo` once installed).

The demo is the offline main job: Adaptive-GEPA end to end on the built-in mini mixture (four
families written for this project), with an in-process GGUF model as actor, router, judge and
reflection LM, a small budget, progress bars, and resume on rerun. It writes to --out:

    report.md                 seed vs optimized test scores per family, routing, the final library,
                              proposals per action, LM usage per role, budget
    learning_curve.png, routing_heatmap.png, lineage.png, family_scores.png
    routed.json               the saved RoutedProgram (DSPy JSON state)
    library/                  the exported library (router.txt, slot_k/...)
    search/                   the optimizer's log_dir (checkpoint, run.json) — rerun to resume
    test_results.json         every test-row score and route, per program

Every LM option also takes a litellm model string (openai/..., ollama/..., hosted_vllm/...).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

FAMILY_NAMES = {"hotpotqa": "multi-hop QA", "aime": "arithmetic", "pupa": "private rewrite",
                "livebench_if": "constrained writing"}


def _demo_examples() -> tuple[list[dspy.Example], list[dspy.Example], list[dspy.Example]]:
    from dspy_adaptive.demo_data import load_demo_mixture

    def adapt(ex: dspy.Example) -> dspy.Example:
        # the benchmark metrics read LiveBench-IF kwargs as `instruction_kwargs`
        if ex.get("family") == "livebench_if" and "instruction_kwargs" not in ex:
            ex = ex.copy(instruction_kwargs=ex.get("kwargs") or [])
        return ex.with_inputs("request")

    return tuple([adapt(e) for e in split] for split in load_demo_mixture())  # type: ignore[return-value]


def _lm(spec: str, **kwargs: Any) -> dspy.LM:
    from dspy_adaptive.lm import make_lm
    return make_lm(spec, **kwargs)


def evaluate_on(program: Any, examples: Sequence[dspy.Example], metric: Any, desc: str,
                num_threads: int = 1) -> list[dict[str, Any]]:
    """Score `program` on `examples`: one row per example with family, score, executed slot."""
    from concurrent.futures import ThreadPoolExecutor
    import contextvars

    from dspy_adaptive.routed_program import route_of

    def one(ex: dspy.Example) -> dict[str, Any]:
        try:
            pred = program(**ex.inputs())
            error = None
        except Exception as e:  # runtime failure: scored 0 without calling the metric
            pred, error = e, f"{type(e).__name__}: {str(e)[:300]}"
        route = route_of(pred)
        score = 0.0 if error else float(metric(ex, pred, None, None, None).score)
        return {"id": ex.id, "family": ex.family, "score": score, "error": error,
                "executed": route.executed if route else None}

    rows: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=max(1, num_threads)) as pool:
        futures = [pool.submit(contextvars.copy_context().run, one, ex) for ex in examples]
        for f in tqdm(futures, desc=desc, unit="row"):
            rows.append(f.result())
    return rows


def family_means(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    fams: dict[str, list[float]] = {}
    for r in rows:
        fams.setdefault(r["family"], []).append(r["score"])
    return {f: sum(v) / len(v) for f, v in sorted(fams.items())}


def demo(args: argparse.Namespace) -> Path:
    from benchmarks.metrics import MixtureMetric
    from benchmarks.programs import SeedProgram
    from benchmarks.retrieval import make_search_tool
    from benchmarks.sampler import FamilyBalancedSampler
    from dspy_adaptive import AdaptiveGEPA, RoutedProgram, load_run
    from dspy_adaptive.analysis import write_labels
    from dspy_adaptive.demo_data import demo_corpus_path
    from dspy_adaptive.plots import plot_lineage, plot_learning_curve, plot_family_scores, plot_routing_heatmap

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    train, val, test = _demo_examples()
    if args.actor_lm == "scripted":  # tests: deterministic scripted LMs for every role
        from benchmarks.run import ScriptedWorld
        from dspy_adaptive.testing import scripted_lm
        world = ScriptedWorld(train + val + test)
        fast = deep = scripted_lm(world.actor, model="scripted/actor")
        reflection, judge = scripted_lm(world.reflection), scripted_lm(world.judge)
    else:
        fast = _lm(args.actor_lm, temperature=0.3, max_tokens=args.max_tokens)
        deep = _lm(args.actor_lm, temperature=0.6, max_tokens=args.max_tokens)
        reflection = _lm(args.reflection_lm, temperature=1.0, max_tokens=args.reflection_max_tokens)
        judge = _lm(args.judge_lm or args.actor_lm, temperature=0.0, max_tokens=256)
    metric = MixtureMetric(judge_lm=judge)
    search = make_search_tool(backend="bm25", corpus_path=demo_corpus_path())
    seed = SeedProgram()
    # tiny local models follow JSON (grammar-constrained) far better than DSPy's chat markers
    dspy.configure(lm=deep, adapter=dspy.JSONAdapter() if args.actor_lm.startswith("local") else None)

    print(f"[demo] {len(train)} feedback / {len(val)} validation / {len(test)} test requests; "
          f"actor {args.actor_lm}, reflection {args.reflection_lm}; budget {args.budget} scored calls")
    optimizer = AdaptiveGEPA(
        metric, reflection_lm=reflection, max_metric_calls=args.budget, reflection_minibatch_size=args.minibatch,
        batch_sampler=FamilyBalancedSampler(), max_specialists=args.max_specialists, num_threads=args.threads,
        fast_lm=fast, deep_lm=deep, tools=[search], log_dir=str(out / "search"), track_stats=True, seed=args.seed,
        max_idle_iterations=args.max_idle)
    routed = optimizer.compile(seed, trainset=train, valset=val)
    write_labels({e.id: e.family for e in val}, out / "search")
    result = load_run(out / "search")

    cached = out / "test_results.json"
    tests = json.loads(cached.read_text()) if cached.exists() else {}
    key = result.candidates[result.best_idx].content_hash
    if "seed" not in tests:
        base = RoutedProgram(seed, fast_lm=fast, deep_lm=deep, tools=[search],
                             max_specialists=args.max_specialists)
        tests["seed"] = evaluate_on(base, test, metric, "test: seed", args.threads)
        cached.write_text(json.dumps(tests, indent=1))
    if tests.get("optimized_hash") != key:
        tests["optimized"] = evaluate_on(routed, test, metric, "test: optimized", args.threads)
        tests["optimized_hash"] = key
        cached.write_text(json.dumps(tests, indent=1))

    routed.save(str(out / "routed.json"))
    routed.export(out / "library")
    test_labels = {r["id"]: r["family"] for r in tests["optimized"]}
    plot_learning_curve(result, out / "learning_curve.png")
    plot_lineage(result, out / "lineage.png")
    plot_family_scores(result, {e.id: e.family for e in val}, out / "family_scores.png")
    plot_routing_heatmap(_with_test_routes(result, tests["optimized"]), test_labels, out / "routing_heatmap.png",
                         candidate=result.best_idx, split="test")
    wall = time.perf_counter() - started
    (out / "report.md").write_text(render_report(result, tests, args, wall), encoding="utf-8")
    routed.close()
    print(f"[demo] done in {wall / 60:.1f} min; report: {out / 'report.md'}")
    return out


def _with_test_routes(result: Any, rows: Sequence[dict[str, Any]]) -> Any:
    """A copy of the run result whose best candidate's routes are the TEST routes (for the heat-map)."""
    from dataclasses import replace
    executed = list(result.executed)
    executed[result.best_idx] = {r["id"]: r["executed"] for r in rows}
    return replace(result, executed=executed)


def render_report(result: Any, tests: dict[str, Any], args: argparse.Namespace, wall: float) -> str:
    from dspy_adaptive.analysis import majority_mapping_agreement

    seed_m, opt_m = family_means(tests["seed"]), family_means(tests["optimized"])
    fams = sorted(seed_m)
    mean = lambda d: sum(d.values()) / len(d)  # noqa: E731
    lines = ["# Adaptive-GEPA demo (offline, built-in mini mixture)", "",
             f"Actor/router/judge: `{args.actor_lm}`; reflection: `{args.reflection_lm}`. Wall time "
             f"{wall / 60:.1f} min. Budget {result.budget['spent']} of {result.budget['max']} scored calls "
             f"(stopped: {result.stop_reason}).", "",
             "A 135M-parameter local model cannot write useful programs or judge well: expect few or no accepted "
             "edits. The point of this run is that every part of the system really runs, offline. Real "
             "optimisation quality needs a capable reflection model (see the README).", "",
             "## Test scores (×100)", "",
             "| program | " + " | ".join(FAMILY_NAMES.get(f, f) for f in fams) + " | family mean |",
             "|---|" + "---:|" * (len(fams) + 1)]
    for name, m in (("seed (fallback only)", seed_m), ("optimized", opt_m)):
        lines.append(f"| {name} | " + " | ".join(f"{100 * m[f]:.1f}" for f in fams) + f" | {100 * mean(m):.1f} |")
    table: dict[str, dict] = {}
    for r in tests["optimized"]:
        table.setdefault(r["family"], {}).setdefault(r["executed"], 0)
        table[r["family"]][r["executed"]] += 1
    per, overall = majority_mapping_agreement(table)
    slots = sorted({k for row in table.values() for k in row}, key=lambda k: (k is None, k or 0))
    lines += ["", f"## Routing on test (post-hoc majority-family agreement {overall:.1f}%)", "",
              "| family | " + " | ".join("fallback" if k == 0 else "unknown" if k is None else f"slot {k}"
                                        for k in slots) + " |", "|---|" + "---:|" * len(slots)]
    for f in fams:
        lines.append(f"| {FAMILY_NAMES.get(f, f)} | " + " | ".join(str(table.get(f, {}).get(k, 0)) for k in slots) + " |")
    lines += ["", "## Validation", "",
              f"Seed validation mean {result.val_aggregate_scores[0]:.3f}; best #{result.best_idx} "
              f"{result.val_aggregate_scores[result.best_idx]:.3f}; {len(result.candidates)} candidates archived.", "",
              "![learning curve](learning_curve.png) ![routing](routing_heatmap.png) ![lineage](lineage.png)", ""]
    from dspy_adaptive.results import render_markdown
    body = render_markdown(result).split("\n", 1)[1]   # drop its title
    lines += ["## Search record", body]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="adaptive-gepa", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run the offline demo end to end (resumes on rerun)")
    d.add_argument("--out", default="runs/demo", help="output directory (default runs/demo)")
    d.add_argument("--actor-lm", default="local",
                   help="actor/router LM: 'local', 'local:/path.gguf', a litellm string, or 'scripted' (tests)")
    d.add_argument("--reflection-lm", default="local", help="reflection LM (same forms)")
    d.add_argument("--judge-lm", default=None, help="PUPA judge LM (default: the actor LM)")
    d.add_argument("--budget", type=int, default=64,
                   help="max_metric_calls (default 64: the seed's 32 validation rows plus ~8 iterations)")
    d.add_argument("--minibatch", type=int, default=4, help="reflection minibatch size (default 4, 1 per family)")
    d.add_argument("--max-specialists", type=int, default=4)
    d.add_argument("--threads", type=int, default=2)
    d.add_argument("--max-tokens", type=int, default=256, help="actor max tokens per call")
    d.add_argument("--reflection-max-tokens", type=int, default=700)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--max-idle", type=int, default=6,
                   help="stop after this many iterations in a row that spend no scored call (default 6)")
    args = p.parse_args(argv)
    if args.command == "demo":
        demo(args)


if __name__ == "__main__":
    main(sys.argv[1:])
