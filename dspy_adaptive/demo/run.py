"""The offline demo end to end: `run_demo(DemoConfig(...))`, what `adaptive-gepa demo` runs.

Adaptive-GEPA on the built-in mini mixture (four families written for this project) with the reusable
pieces of `dspy_adaptive.tasks` (seed program, mixture metric, family-balanced sampler, BM25 search
over the demo corpus) and an in-process GGUF model as actor, router, judge and reflection LM, a small
budget, progress bars, and resume on rerun. It writes to `out`:

    report.md                 seed vs optimized test scores per family, routing, the final library,
                              proposals per action, LM usage per role, budget
    learning_curve.png, routing_heatmap.png, lineage.png, family_scores.png
    routed.json               the saved RoutedProgram (DSPy JSON state)
    library/                  the exported library (router.txt, slot_k/...)
    search/                   the optimizer's log_dir (checkpoint, run.json) — rerun to resume
    test_results.json         every test-row score and route, per program
"""

from __future__ import annotations

import contextvars
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import dspy
from tqdm.auto import tqdm

from dspy_adaptive.records import slot_label
from dspy_adaptive.scoring import score_example
from dspy_adaptive.untrusted import md_code

FAMILY_NAMES = {"hotpotqa": "multi-hop QA", "aime": "arithmetic", "pupa": "private rewrite",
                "livebench_if": "constrained writing"}


@dataclass(frozen=True)
class DemoConfig:
    """The demo's settings (the `adaptive-gepa demo` options).

    Args:
        out: output directory.
        actor_lm: actor/router LM: "local", "local:/path.gguf", a litellm model string, or "scripted"
            (deterministic scripted LMs for every role, for tests).
        reflection_lm: reflection LM (same forms).
        judge_lm: PUPA judge LM (default: the actor LM).
        budget: max_metric_calls.
        minibatch: reflection minibatch size.
        max_specialists: K, the number of specialist slots.
        threads: evaluation threads.
        max_tokens: actor max tokens per call.
        reflection_max_tokens: reflection max tokens per call.
        seed: the search's random seed.
        max_idle: stop after this many iterations in a row that spend no scored call.
        proposal_format: "code", "structured" or "auto" (see AdaptiveGEPA); None: "structured" when the
            reflection LM is the local model (a 135M model cannot write a valid dspy.Module, but it fills a
            grammar-constrained specification), else "auto".
        max_repair_attempts: repair calls after a reflection answer is rejected before the gate.
    """

    out: str = "runs/demo"
    actor_lm: str = "local"
    reflection_lm: str = "local"
    judge_lm: str | None = None
    budget: int = 64
    minibatch: int = 4
    max_specialists: int = 4
    threads: int = 2
    max_tokens: int = 256
    reflection_max_tokens: int = 700
    seed: int = 0
    max_idle: int = 6
    proposal_format: str | None = None
    max_repair_attempts: int = 1

    def resolved_format(self) -> str:
        if self.proposal_format is not None:
            return self.proposal_format
        return "structured" if self.reflection_lm.startswith("local") else "auto"


def demo_examples() -> tuple[list[dspy.Example], list[dspy.Example], list[dspy.Example]]:
    """The mixture's (train, val, test), shaped for `tasks.metrics` (LiveBench-IF kwargs as `instruction_kwargs`)."""
    from dspy_adaptive.demo.mixture import load_demo_mixture

    def adapt(ex: dspy.Example) -> dspy.Example:
        if ex.get("family") == "livebench_if" and "instruction_kwargs" not in ex:
            ex = ex.copy(instruction_kwargs=ex.get("kwargs") or [])
        return ex.with_inputs("request")

    return tuple([adapt(e) for e in split] for split in load_demo_mixture())  # type: ignore[return-value]


def evaluate_on(program: Any, examples: Sequence[dspy.Example], metric: Any, desc: str,
                num_threads: int = 1) -> list[dict[str, Any]]:
    """Score `program` on `examples` (through `scoring.score_example`): one row per example with its
    family, score, error and executed slot."""
    def one(ex: dspy.Example) -> dict[str, Any]:
        r = score_example(program, ex, metric, row_id=ex.id)
        return {"id": ex.id, "family": ex.family, "score": r.score, "error": r.error, "executed": r.executed}

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


def _lm(spec: str, **kwargs: Any) -> dspy.LM:
    from dspy_adaptive.lm import make_lm
    return make_lm(spec, **kwargs)


def run_demo(config: DemoConfig) -> Path:
    """Run (or resume) the demo; returns the output directory."""
    from dspy_adaptive import AdaptiveGEPA, RoutedProgram, load_run
    from dspy_adaptive.analysis import write_labels
    from dspy_adaptive.demo.mixture import demo_corpus_path
    from dspy_adaptive.plots import plot_family_scores, plot_learning_curve, plot_lineage, plot_routing_heatmap
    from dspy_adaptive.tasks.metrics import MixtureMetric
    from dspy_adaptive.tasks.programs import SeedProgram
    from dspy_adaptive.tasks.retrieval import make_search_tool
    from dspy_adaptive.tasks.sampler import FamilyBalancedSampler

    c = config
    out = Path(c.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    train, val, test = demo_examples()
    if c.actor_lm == "scripted":  # tests: deterministic scripted LMs for every role
        from dspy_adaptive.testing import ScriptedWorld, scripted_lm
        world = ScriptedWorld(train + val + test)
        fast = deep = scripted_lm(world.actor, model="scripted/actor")
        reflection, judge = scripted_lm(world.reflection), scripted_lm(world.judge)
    else:
        fast = _lm(c.actor_lm, temperature=0.3, max_tokens=c.max_tokens)
        deep = _lm(c.actor_lm, temperature=0.6, max_tokens=c.max_tokens)
        reflection = _lm(c.reflection_lm, temperature=1.0, max_tokens=c.reflection_max_tokens)
        judge = _lm(c.judge_lm or c.actor_lm, temperature=0.0, max_tokens=256)
    metric = MixtureMetric(judge_lm=judge)
    search = make_search_tool(backend="bm25", corpus_path=demo_corpus_path())
    seed = SeedProgram()
    # tiny local models follow JSON (grammar-constrained) far better than DSPy's chat markers
    dspy.configure(lm=deep, adapter=dspy.JSONAdapter() if c.actor_lm.startswith("local") else None)

    print(f"[demo] {len(train)} feedback / {len(val)} validation / {len(test)} test requests; "
          f"actor {c.actor_lm}, reflection {c.reflection_lm}; budget {c.budget} scored calls")
    optimizer = AdaptiveGEPA(
        metric, reflection_lm=reflection, max_metric_calls=c.budget, reflection_minibatch_size=c.minibatch,
        batch_sampler=FamilyBalancedSampler(), max_specialists=c.max_specialists, num_threads=c.threads,
        fast_lm=fast, deep_lm=deep, tools=[search], log_dir=str(out / "search"), track_stats=True, seed=c.seed,
        max_idle_iterations=c.max_idle, proposal_format=c.resolved_format(),
        max_repair_attempts=c.max_repair_attempts)
    routed = optimizer.compile(seed, trainset=train, valset=val)
    write_labels({e.id: e.family for e in val}, out / "search")
    result = load_run(out / "search")

    cached = out / "test_results.json"
    tests = json.loads(cached.read_text()) if cached.exists() else {}
    key = result.candidates[result.best_idx].content_hash
    if "seed" not in tests:
        base = RoutedProgram(seed, fast_lm=fast, deep_lm=deep, tools=[search], max_specialists=c.max_specialists)
        tests["seed"] = evaluate_on(base, test, metric, "test: seed", c.threads)
        cached.write_text(json.dumps(tests, indent=1))
    if tests.get("optimized_hash") != key:
        tests["optimized"] = evaluate_on(routed, test, metric, "test: optimized", c.threads)
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
    (out / "report.md").write_text(render_report(result, tests, c, wall), encoding="utf-8")
    routed.close()
    print(f"[demo] done in {wall / 60:.1f} min; report: {out / 'report.md'}")
    return out


def _with_test_routes(result: Any, rows: Sequence[dict[str, Any]]) -> Any:
    """A copy of the run result whose best candidate's routes are the TEST routes (for the heat-map)."""
    executed = list(result.executed)
    executed[result.best_idx] = {r["id"]: r["executed"] for r in rows}
    return replace(result, executed=executed)


def render_report(result: Any, tests: dict[str, Any], config: DemoConfig, wall: float) -> str:
    from dspy_adaptive.analysis import majority_mapping_agreement
    from dspy_adaptive.results import render_markdown

    seed_m, opt_m = family_means(tests["seed"]), family_means(tests["optimized"])
    fams = sorted(seed_m)

    def mean(d: dict[str, float]) -> float:
        return sum(d.values()) / len(d)

    lines = ["# Adaptive-GEPA demo (offline, built-in mini mixture)", "",
             f"Actor/router/judge: {md_code(config.actor_lm)}; reflection: {md_code(config.reflection_lm)}. Wall time "
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
              "| family | " + " | ".join(slot_label(k) for k in slots) + " |", "|---|" + "---:|" * len(slots)]
    for f in fams:
        lines.append(f"| {FAMILY_NAMES.get(f, f)} | "
                     + " | ".join(str(table.get(f, {}).get(k, 0)) for k in slots) + " |")
    lines += ["", "## Validation", "",
              f"Seed validation mean {result.val_aggregate_scores[0]:.3f}; best #{result.best_idx} "
              f"{result.val_aggregate_scores[result.best_idx]:.3f}; {len(result.candidates)} candidates archived.",
              "", "![learning curve](learning_curve.png) ![routing](routing_heatmap.png) ![lineage](lineage.png)", ""]
    body = render_markdown(result).split("\n", 1)[1]   # drop its title
    lines += ["## Search record", body]
    return "\n".join(lines) + "\n"


__all__ = ["DemoConfig", "FAMILY_NAMES", "demo_examples", "evaluate_on", "family_means", "render_report",
           "run_demo"]
