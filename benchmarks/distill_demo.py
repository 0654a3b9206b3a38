"""The distilled router on the demo's mixture with a real local router LM: `python -m benchmarks.distill_demo`.

`adaptive-gepa demo --distill-router` distils whatever router its search ends with; with the 135M local model
the search rarely activates a specialist, and a library without one never calls its LM router, so there is
nothing to distill. This measures the distillation itself on the demo's mixture with the local model routing:
it builds the library a search aims for -- one specialist per family, each a shape the structured proposer
writes (`reflection.structured.render`), with a plain description -- routes with the local model (the LM
router), distils that router on the 64 feedback + validation requests (`RoutedProgram.distill_router`), and
routes the 32 test requests both ways (`dspy_adaptive.distill.compare_routing`, uncached: real calls, tokens
and latency). The task score is paired by request, as `benchmarks.run --distill-router` pairs it: a request the
distilled router sends where the LM router sent it runs the same program either way, so it keeps its score; the
others are run and scored again with the distilled router serving. Writes `--out/distill_demo.json` and prints
the figures.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Sequence

import dspy

#: one specialist per demo family: (family, description, shape, instructions, second step)
SPECIALISTS: tuple[tuple[str, str, str, str, str], ...] = (
    ("arithmetic", "Arithmetic word problems and calculations: the request asks for a number.",
     "chain_of_thought", "Work out the arithmetic step by step and answer with the final number only.", ""),
    ("multihop", "Questions about people, places or things in the knowledge base that need facts looked up, "
                 "often two facts joined together.",
     "retrieve_then_answer", "Answer the question from the passages in a few words.", ""),
    ("private", "Rewrite a message so that it keeps its meaning but leaves out private details such as names, "
                "addresses, phone numbers or account numbers.",
     "predict", "Rewrite the message without any private detail; keep everything else.", ""),
    ("constrained", "Write a text that must follow explicit constraints (length, words to include or avoid, "
                    "format).",
     "draft_and_check", "Write the requested text.", "Check every constraint of the request and fix the draft."),
)


def library(tools: Sequence[str]) -> Any:
    """The demo library: one active specialist per family, in SPECIALISTS' order."""
    from dspy_adaptive import Library, Slot
    from dspy_adaptive.reflection.structured import Contract, ProgramSpec, render
    from dspy_adaptive.tasks import INPUT_FIELD, OUTPUT_FIELD

    contract = Contract((INPUT_FIELD,), (OUTPUT_FIELD,), tuple(tools), ("query",) * len(tools))
    lib = Library.empty(len(SPECIALISTS))
    for i, (_fam, desc, kind, ins, second) in enumerate(SPECIALISTS, start=1):
        spec = ProgramSpec(kind, ins, second, tools[0] if kind == "retrieve_then_answer" else "")
        lib = lib.with_slot(i, Slot().activated(desc, render(spec, contract), "fast"))
    return lib


def measure(lm_spec: str = "local", threads: int = 2, seed: int = 0) -> dict[str, Any]:
    from benchmarks.distill import paired_scores, score_summary
    from dspy_adaptive import RoutedProgram
    from dspy_adaptive.demo.mixture import demo_corpus_path
    from dspy_adaptive.demo.run import DemoConfig, demo_examples, evaluate_on
    from dspy_adaptive.distill import DistillSettings, compare_routing
    from dspy_adaptive.lm import make_lm
    from dspy_adaptive.lm.plain_adapter import PlainTextAdapter
    from dspy_adaptive.tasks.metrics import MixtureMetric
    from dspy_adaptive.tasks.programs import SeedProgram
    from dspy_adaptive.tasks.retrieval import make_search_tool

    c = DemoConfig()
    train, val, test = demo_examples()
    fast = make_lm(lm_spec, temperature=0.3, max_tokens=c.max_tokens)
    judge = make_lm(lm_spec, temperature=0.0, max_tokens=c.judge_max_tokens)
    metric = MixtureMetric(judge_lm=judge)
    search = make_search_tool(backend="bm25", corpus_path=demo_corpus_path())
    dspy.configure(lm=fast, adapter=PlainTextAdapter())

    def program(lm: Any) -> Any:
        return RoutedProgram(SeedProgram(), library(["search"]), fast_lm=lm, deep_lm=lm, tools=[search])

    routed = program(fast)
    t0 = time.perf_counter()
    d = routed.distill_router(train + val, DistillSettings(num_threads=threads, seed=seed))
    distill_s = time.perf_counter() - t0
    print(f"[distill-demo] distilled on {len(train) + len(val)} requests in {distill_s:.0f} s: {d.summary()}",
          flush=True)
    measured = program(fast.copy(cache=False))
    measured.use_distilled_router(d)
    ids = [str(ex.id) for ex in test]
    routing = compare_routing(measured, test, ids=ids)
    served = {r["id"]: r["served"] for r in routing.per_request}
    lm_route = {r["id"]: r["lm"] for r in routing.per_request}
    lm_rows = evaluate_on(routed, test, metric, "test: LM router", threads)        # the LM router serving
    for row in lm_rows:
        row["route"] = lm_route[str(row["id"])]
    changed = [ex for ex in test if served[str(ex.id)] != lm_route[str(ex.id)]]
    rerun = {}
    if changed:
        rerun = {str(r["id"]): r for r in evaluate_on(measured, changed, metric, "test: distilled", threads)}
    rows = paired_scores(lm_rows, served, rerun)
    by_family = {}
    for fam in sorted({ex.family for ex in test}):
        routes = [lm_route[str(ex.id)] for ex in test if ex.family == fam]
        by_family[fam] = {"lm_router_slots": routes}
    return {"lm": lm_spec, "router": d.summary(), "distill_seconds": round(distill_s, 1),
            "routing": {k: v for k, v in routing.to_dict().items() if k != "per_request"},
            "per_request": routing.per_request, "scores": score_summary(rows, seed=seed), "test": rows,
            "lm_router_by_family": by_family}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.distill_demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--lm", default="local", help="the router / actor / judge LM (default: the packaged local model)")
    p.add_argument("--out", default="runs/distill-demo")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    res = measure(args.lm, args.threads, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "distill_demo.json").write_text(json.dumps(res, indent=1, default=str) + "\n", encoding="utf-8")
    r, s = res["routing"], res["scores"]
    print(f"[distill-demo] agreement {r['agreement']:.1%} (classifier alone {r['classifier_agreement']:.1%}); LM "
          f"router still called on {r['share_lm_router']:.1%}; router calls {r['router_calls_lm']} -> "
          f"{r['router_calls_distilled']}, tokens {r['router_tokens_lm']} -> {r['router_tokens_distilled']}; "
          f"routing {r['latency_ms_lm']:.0f} ms -> {r['latency_ms_distilled']:.1f} ms per request; score "
          f"{s['lm']:.3f} (LM router) vs {s['distilled']:.3f} (distilled), diff {s['paired']['diff']:+.3f} "
          f"[{s['paired']['ci_low']:+.3f}, {s['paired']['ci_high']:+.3f}] -> {out / 'distill_demo.json'}")
    return res


if __name__ == "__main__":
    main()
