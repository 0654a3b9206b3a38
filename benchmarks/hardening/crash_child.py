"""Child process for the crash/resume checks: one scripted search that can SIGKILL itself.

    python benchmarks/hardening/crash_child.py '{"log_dir": ..., "scenario": "toy"|"merge", "kill": "none"|
                                             "actor:N"|"reflection:N"|"checkpoint:N", "calls": path}'

Every LM call appends "<role>\t<detail>" to the `calls` file (flushed before the call is answered), every
metric call appends "metric\t<row id>", every evaluation batch "evaluate\t<kind>", every state.json write
"checkpoint\t<n>". kill=actor:N / reflection:N SIGKILLs the process at the N-th call of that LM (after
logging it, before answering); kill=checkpoint:N writes the N-th state.json temp file (fsynced) and then
SIGKILLs before os.replace - a crash in the middle of the atomic write.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402

import dspy_adaptive.search.checkpoint as checkpoint  # noqa: E402
from dspy_adaptive import AdaptiveGEPA  # noqa: E402
from dspy_adaptive.search.evaluate import Evaluator  # noqa: E402
from dspy_adaptive.testing import scripted_lm  # noqa: E402
from tests.core import toy  # noqa: E402


def main(cfg: dict) -> None:
    calls = open(cfg["calls"], "a", encoding="utf-8")
    kill_role, _, kill_n = cfg.get("kill", "none").partition(":")
    kill_n = int(kill_n or 0)
    counts = {"actor": 0, "reflection": 0, "checkpoint": 0}

    def log(line: str) -> None:
        calls.write(line + "\n")
        calls.flush()

    def tick(role: str, detail: str) -> None:
        counts[role] += 1
        log(f"{role}\t{detail}")
        if role == kill_role and counts[role] == kill_n:
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap(respond, role):
        def responder(call):
            tick(role, ",".join(call.output_fields))
            return respond(call)
        return responder

    real_write = checkpoint.atomic_write_text

    def write(path, text):
        if path.name == checkpoint.STATE:
            counts["checkpoint"] += 1
            log(f"checkpoint\t{counts['checkpoint']}")
            if kill_role == "checkpoint" and counts["checkpoint"] == kill_n:
                tmp = path.with_name(path.name + ".tmp")
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
                os.kill(os.getpid(), signal.SIGKILL)     # after the temp file, before os.replace
        real_write(path, text)

    checkpoint.atomic_write_text = write
    real_evaluate = Evaluator.evaluate

    def evaluate(self, library, rows, kind, tag=0):
        log(f"evaluate\t{kind}")
        return real_evaluate(self, library, rows, kind, tag)

    Evaluator.evaluate = evaluate

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        log(f"metric\t{gold.id}")
        return toy.metric(gold, pred, trace, pred_name, pred_trace)

    if cfg["scenario"] == "merge":
        train, val = toy.make_examples3(4), toy.make_examples3(4, offset=100)
        actor = scripted_lm(wrap(toy.router3_respond, "actor"), model="scripted/actor")
        refl_engine = toy.branching_reflection_lm().scripted.respond
        params = dict(max_metric_calls=150, reflection_minibatch_size=3, seed=1, use_merge=True, merge_cadence=2)
    else:
        from benchmarks.hardening.lm_faults import reflection_respond
        train, val = toy.make_examples(4), toy.make_examples(4, offset=100)
        actor = scripted_lm(wrap(toy.actor_respond, "actor"), model="scripted/actor")
        refl_engine = reflection_respond
        params = dict(max_metric_calls=90, reflection_minibatch_size=4, seed=3, use_merge=False,
                      skip_perfect_score=False)
    reflection = scripted_lm(wrap(refl_engine, "reflection"), model="scripted/reflection")
    with dspy.context(lm=actor):
        opt = AdaptiveGEPA(metric, reflection_lm=reflection, track_stats=True, progress=False, num_threads=1,
                           log_dir=cfg["log_dir"], **params)
        routed = opt.compile(dspy.Predict("question -> answer"), trainset=train, valset=val)
        routed.close()
    log("done\t1")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
