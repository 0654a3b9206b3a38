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
import os
import sys
from typing import Sequence


def build_parser() -> argparse.ArgumentParser:
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
    d.add_argument("--proposal-format", choices=("code", "structured", "auto"), default=None,
                   help="how new specialist programs are written: the reflection LM writes code, fills a "
                        "structured specification we render, or auto (code, then structured after repeated "
                        "rejections). Default: structured for the local model, auto otherwise")
    d.add_argument("--max-repair-attempts", type=int, default=1,
                   help="repair calls after a reflection answer is rejected before the gate (default 1)")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    # offline by default: litellm reads its bundled model cost map instead of fetching one (set here, in the
    # command, not at import: importing the library must not change litellm's behaviour for its users)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if args.command == "demo":
        from dspy_adaptive.demo.run import DemoConfig, run_demo

        options = {k: v for k, v in vars(args).items() if k != "command"}
        run_demo(DemoConfig(**options))


if __name__ == "__main__":
    main(sys.argv[1:])
