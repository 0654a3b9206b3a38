"""`benchmarks.run --distill-router`: the distilled router measured on the test split against the LM router.

After the test phase, the run's program (a RoutedProgram: adaptive, one-shot, oeo) distils its LM router on
the train and validation requests (`RoutedProgram.distill_router`), then every test request is routed both
ways, one at a time (`dspy_adaptive.distill.compare_routing`, LMs uncached so calls, tokens and latency are
real): agreement with the LM router, the share still sent to the LM router, router LM calls and tokens
saved, and routing time per request.

The task score is paired by request. A test request the distilled router sends where the test phase ran it
(its executed slot) runs the same program either way, so it keeps its test score; every other request is run
and scored again with the distilled router serving (AIME: the same attempts, uncached). The difference, its 95%
interval and p-value are `benchmarks.protocol.paired_stats`, as the protocol report computes them.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any, Mapping, Sequence

ROUTED_METHODS = ("adaptive", "one-shot", "oeo")


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def paired_scores(test_rows: Sequence[Mapping[str, Any]], served: Mapping[str, int],
                  rerun: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per test request: the LM router's score (the test phase's), the distilled router's (rerun where it
    routed elsewhere, else the same), and whether it was rerun."""
    out = []
    for row in test_rows:
        rid = str(row["id"])
        again = rerun.get(rid)
        out.append({"id": rid, "family": row["family"], "lm_route": row.get("route"), "route": served.get(rid),
                    "lm_score": float(row["score"]),
                    "score": float(again["score"]) if again is not None else float(row["score"]),
                    "rerun": again is not None})
    return out


def score_summary(rows: Sequence[Mapping[str, Any]], seed: int = 0) -> dict[str, Any]:
    """Means, the paired difference with its interval (overall and per family)."""
    from benchmarks.protocol import paired_stats

    def stats(sub: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        s = paired_stats([r["lm_score"] for r in sub], [r["score"] for r in sub], seed=seed)
        return {**asdict(s), "significant": s.significant}

    families = sorted({r["family"] for r in rows})
    return {"lm": _mean([r["lm_score"] for r in rows]), "distilled": _mean([r["score"] for r in rows]),
            "rerun": sum(r["rerun"] for r in rows), "paired": stats(rows),
            "by_family": {f: stats([r for r in rows if r["family"] == f]) for f in families}}


def distill_phase(method: str, spec: Mapping[str, Any], ctx: Any, phases: Any, test_rows: Sequence[dict]) -> dict:
    done = phases.load("distill")
    if done is not None:
        print("[distill] already finished; skipping")
        return done
    if method not in ROUTED_METHODS:
        return phases.save("distill", {"built": False, "reason": f"--method {method} has no LM router to distill "
                                                                 f"(routed methods: {', '.join(ROUTED_METHODS)})"})
    from benchmarks.run import build_program, score_examples
    from dspy_adaptive.distill import DistillError, DistillSettings, compare_routing

    mix, args = ctx.mixture, ctx.args
    cached = build_program(method, spec, ctx, ctx.roles)
    try:
        d = cached.distill_router(mix.train + mix.val, DistillSettings(num_threads=args.num_threads, seed=args.seed))
    except DistillError as e:
        print(f"[distill] no distilled router: {e}")
        return phases.save("distill", {"built": False, "reason": str(e)})
    measured = build_program(method, spec, ctx, ctx.roles.uncached())      # real calls, tokens and latency
    measured.use_distilled_router(d)
    ids = [str(ex.id) for ex in mix.test]
    routing = compare_routing(measured, mix.test, ids=ids)
    served = {r["id"]: r["served"] for r in routing.per_request}
    ran = {str(r["id"]): r.get("route") for r in test_rows}
    changed = [ex for ex in mix.test if served[str(ex.id)] != ran.get(str(ex.id))]
    rerun: dict[str, dict] = {}
    if changed:
        print(f"[distill] {len(changed)} test requests routed elsewhere than in the test phase: scoring them again")
        rerun = {r["id"]: r for r in score_examples(ctx, cached, measured, changed)}
    rows = paired_scores(test_rows, served, rerun)
    payload = {"built": True, "router": d.summary(), "training": d.training,
               "routing": {k: v for k, v in routing.to_dict().items() if k != "per_request"},
               "per_request": routing.per_request, "scores": score_summary(rows, seed=args.seed), "test": rows,
               "distilled_router": d.to_dict()}
    (ctx.out / "distilled_router.json").write_text(json.dumps(d.to_dict(), indent=1, sort_keys=True) + "\n",
                                                   encoding="utf-8")
    r, s = payload["routing"], payload["scores"]
    print(f"[distill] agreement {r['agreement']:.1%}, LM router still called on {r['share_lm_router']:.1%}, "
          f"router calls saved {r['router_calls_saved']}, tokens saved {r['router_tokens_saved']}; score "
          f"{s['lm']:.3f} (LM router) vs {s['distilled']:.3f} (distilled), diff {s['paired']['diff']:+.3f} "
          f"[{s['paired']['ci_low']:+.3f}, {s['paired']['ci_high']:+.3f}]")
    return phases.save("distill", payload)


__all__ = ["ROUTED_METHODS", "distill_phase", "paired_scores", "score_summary"]
