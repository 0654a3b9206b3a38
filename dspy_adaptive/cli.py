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
import signal
import sys
from typing import Sequence

DEMO_HELP = """Run Adaptive-GEPA end to end, offline, on the built-in mini mixture (multi-hop questions over an
invented corpus, arithmetic, private-detail rewrites, constrained writing: 32 feedback, 32 validation and 32
test requests), with the local 135M SmolLM2 model as actor, router, judge and reflection LM. About 15-20
minutes on 2 cores (2-3 s per scored call, about a minute per proposal). Ctrl-C (or SIGTERM, e.g. from
`timeout`) stops it; rerun the same command to resume where it stopped (nothing scored is lost, and the
report's wall time is the total over every session).

It writes to --out: report.md (what happened: proposals by outcome and why, test scores of the seed and the
optimized program with whether the change is above the noise, routing, the library, LM usage), PNG plots,
routed.json (the saved program), library/ (the exported library), search/ (the optimizer's log_dir) and
test_results.json."""

DEMO_EPILOG = """examples:
  adaptive-gepa demo --out runs/demo                          the main job (local model)
  adaptive-gepa demo --out runs/tour --actor-lm scripted      a tour of the accept path in seconds: scripted LMs
                                                              for every role propose, gate and accept edits
  adaptive-gepa demo --out runs/vllm --actor-lm hosted_vllm/Qwen/Qwen3-8B --reflection-lm openai/gpt-4.1
  python -m dspy_adaptive.cli demo ...                        the same, without installing the command
explore a finished run: notebooks/explore_run.ipynb (give it the --out folder)"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="adaptive-gepa", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run the offline demo end to end (resumes on rerun)", description=DEMO_HELP,
                       epilog=DEMO_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--out", default="runs/demo", help="output directory (default runs/demo)")
    d.add_argument("--actor-lm", default="local",
                   help="actor/router LM: 'local' (the bundled 135M model), 'local:/path.gguf', a litellm model "
                        "string, or 'scripted' (deterministic scripted LMs for every role: a tour in seconds of "
                        "the accept path)")
    d.add_argument("--reflection-lm", default="local", help="reflection LM (same forms)")
    d.add_argument("--judge-lm", default=None, help="PUPA judge LM (default: the actor LM)")
    d.add_argument("--budget", type=int, default=160,
                   help="max_metric_calls (default 160: the seed's 32 validation rows, then 8 feedback calls per "
                        "iteration and 32 more for each edit that passes the gate; about 2-3 s per call here)")
    d.add_argument("--minibatch", type=int, default=4, help="reflection minibatch size (default 4, 1 per family)")
    d.add_argument("--max-specialists", type=int, default=4, help="K, the number of specialist slots (default 4)")
    d.add_argument("--threads", type=int, default=2, help="evaluation threads (default 2)")
    d.add_argument("--max-tokens", type=int, default=96,
                   help="actor max tokens per call (default 96: a small model's answers stay short, and fast)")
    d.add_argument("--reflection-max-tokens", type=int, default=700,
                   help="reflection max tokens per call (default 700); an answer cut off there is refused")
    d.add_argument("--judge-max-tokens", type=int, default=384,
                   help="PUPA judge max tokens per call (default 384); a verdict cut off there is a metric fault")
    d.add_argument("--seed", type=int, default=0, help="the search's random seed (default 0)")
    d.add_argument("--max-idle", type=int, default=6,
                   help="stop after this many iterations in a row that spend no scored call (default 6)")
    d.add_argument("--proposal-format", choices=("code", "structured", "auto"), default=None,
                   help="how new specialist programs are written: the reflection LM writes code, fills a "
                        "structured specification we render, or auto (code, then structured after repeated "
                        "rejections). Default: structured for the local model, auto otherwise")
    d.add_argument("--max-repair-attempts", type=int, default=1,
                   help="repair calls after a reflection answer is rejected before the gate (default 1)")
    d.add_argument("--distill-router", action="store_true",
                   help="after the search, distil the optimized LM router into a calibrated classifier and serve "
                        "the test requests with it (requests it is unsure of still go to the LM router)")
    return p


INTERRUPTED = "interrupted — rerun the same command to resume"
TERMINATED = "terminated (SIGTERM) — rerun the same command to resume"


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    # offline by default: litellm reads its bundled model cost map instead of fetching one (set here, in the
    # command, not at import: importing the library must not change litellm's behaviour for its users)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if args.command == "demo":
        from dspy_adaptive.data import InputError
        from dspy_adaptive.demo.run import DemoConfig, DemoError, run_demo

        options = {k: v for k, v in vars(args).items() if k != "command"}
        for name in ("budget", "minibatch", "max_specialists", "threads", "max_tokens", "reflection_max_tokens",
                     "judge_max_tokens", "max_idle"):
            if options[name] < 1:
                parser.error(f"--{name.replace('_', '-')} must be at least 1, got {options[name]}")
        unused = [k for k in ("reflection_lm", "judge_lm") if options[k] not in (None, "local", "scripted")]
        if options["actor_lm"] == "scripted" and unused:
            given = " and ".join(f"--{k.replace('_', '-')} {options[k]}" for k in unused)
            parser.error(f"--actor-lm scripted scripts every role, so {given} would not be used: leave "
                         f"{'it' if ' and ' not in given else 'them'} out, or pick a real --actor-lm")
        if options["max_repair_attempts"] < 0:
            parser.error(f"--max-repair-attempts must be 0 or more, got {options['max_repair_attempts']}")
        from dspy_adaptive.optimizers.terminate import Terminated, sigterm_as_interrupt

        try:
            with sigterm_as_interrupt():        # `timeout`, `kill`: stop as on Ctrl-C, wall time recorded
                run_demo(DemoConfig(**options))
        except KeyboardInterrupt as e:
            # Everything scored is already on disk (each call is logged as it completes): leave at once rather
            # than wait for LM calls still running in worker threads. A second Ctrl-C while leaving is ignored.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            terminated = isinstance(e, Terminated)
            try:
                print(f"\n{TERMINATED if terminated else INTERRUPTED}", file=sys.stderr, flush=True)
                sys.stdout.flush()
            except (OSError, ValueError):
                pass                    # the output went away (a closed pipe): leave all the same
            finally:
                os._exit(143 if terminated else 130)
        except (DemoError, InputError) as e:
            parser.exit(2, f"adaptive-gepa demo: error: {e}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
