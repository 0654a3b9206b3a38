"""Family 4: bad input, refused before any LM call with a message naming the problem and the fix; and
metric faults at run time, handled and recorded in run.json `faults`.

Why a valset missing the fields the metric reads is NOT detected up front: the metric needs a prediction,
and the only way to get one is to run the program (an LM call). Calling the metric on a made-up
prediction would run user code (possibly an LM judge) on fake data. Instead the run records it: a metric
that raises (KeyError/AttributeError on the missing field) is a metric fault scored failure_score, and
run.json `faults.metric_faults` counts it (checked by run_metric_faults below).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import dspy

from dspy_adaptive import AdaptiveGEPA
from dspy_adaptive.testing import scripted_lm
from tests.core import toy


def _never(call):
    raise AssertionError("an LM was called before input validation")


def _opt(lm, **kw):
    params = dict(reflection_lm=lm, max_metric_calls=60, progress=False)
    params.update(kw)
    return AdaptiveGEPA(kw.pop("metric", toy.metric), **{k: v for k, v in params.items() if k != "metric"})


def _compile(lm, tmp: Path, train=None, val=None, student=None, **kw):
    train = toy.make_examples(2) if train is None else train
    val = toy.make_examples(2, offset=50) if val is None else val
    with dspy.context(lm=lm):
        return _opt(lm, **kw).compile(student or dspy.Predict("question -> answer"), trainset=train, valset=val)


def _previous_run(tmp: Path, name: str) -> Path:
    """A real (scripted) finished run whose log_dir the bad-input cases then misuse."""
    d = tmp / name
    if not (d / "state.json").exists():
        with dspy.context(lm=toy.actor_lm()):
            AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(), max_metric_calls=20, progress=False,
                         log_dir=str(d)).compile(dspy.Predict("question -> answer"), trainset=toy.make_examples(2),
                                                 valset=toy.make_examples(2, offset=50))
    return d


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[Any, Path], Any]      # (never-called LM, tmp) -> raises
    exc: type
    problem: str                         # regex: the message names the problem
    fix: str                             # regex: ... and the fix


def _ex(**kw):
    return dspy.Example(**kw)


CASES = [
    Case("metric not callable", lambda lm, t: AdaptiveGEPA("accuracy", reflection_lm=lm, max_metric_calls=9),
         ValueError, r"metric must be callable", r"callable"),
    Case("metric with two arguments",
         lambda lm, t: AdaptiveGEPA(lambda g, p: 1.0, reflection_lm=lm, max_metric_calls=9),
         ValueError, r"five arguments", r"def metric\(gold, pred, trace=None"),
    Case("no budget", lambda lm, t: _opt(lm, max_metric_calls=None), ValueError,
         r"exactly one of auto, max_full_evals, max_metric_calls", r"Set exactly one"),
    Case("bool budget", lambda lm, t: _opt(lm, max_metric_calls=None, max_full_evals=True), ValueError,
         r"max_full_evals", r"positive integer"),
    Case("no reflection LM", lambda lm, t: _opt(None), ValueError, r"reflection_lm is required",
         r"reflection_lm=dspy\.LM\("),
    Case("failure_score above perfect_score", lambda lm, t: _opt(lm, failure_score=2.0), ValueError,
         r"failure_score \(2\.0\)", r"must not exceed perfect_score"),
    Case("merge_cadence 0", lambda lm, t: _opt(lm, merge_cadence=0), ValueError, r"merge_cadence", r">= 1"),
    Case("fractional minibatch", lambda lm, t: _opt(lm, reflection_minibatch_size=2.5), ValueError,
         r"reflection_minibatch_size", r"integer >= 1"),
    Case("num_threads as a string", lambda lm, t: _opt(lm, num_threads="4"), ValueError, r"num_threads",
         r"positive integer or None"),
    Case("teacher passed", lambda lm, t: _opt(lm).compile(dspy.Predict("question -> answer"),
                                                         trainset=toy.make_examples(2), teacher=dspy.Predict("q -> a")),
         ValueError, r"does not use a teacher", r"teacher"),
    Case("example declares a missing input", lambda lm, t: _compile(
        lm, t, train=[dspy.Example(id="x", answer="a").with_inputs("question")]),
        ValueError, r"declares inputs \['question'\] that it does not contain", r"trainset\[0\]"),
    Case("id as an input field", lambda lm, t: _compile(
        lm, t, train=[_ex(id="1", question="q", answer="a").with_inputs("id", "question")]),
        ValueError, r"'id' must not be an input field", r"ids are bookkeeping"),
    Case("tool with a private name", lambda lm, t: _compile(lm, t, tools={"_search": len}), ValueError,
         r"tool names must be public Python identifiers", r"got '_search'"),
    Case("tool not callable", lambda lm, t: _compile(lm, t, tools={"search": 42}), TypeError,
         r"tool 'search' is not callable", r"not callable"),
    Case("log_dir is an existing file", lambda lm, t: (t / "afile").write_text("x") and _compile(
        lm, t, log_dir=str(t / "afile")), PermissionError, r"is not writable", r"pass a directory you can write to"),
    Case("log_dir under a file", lambda lm, t: (t / "blocker").write_text("x") and _compile(
        lm, t, log_dir=str(t / "blocker" / "sub")), PermissionError, r"is not writable", r"log_dir=None"),
    Case("log_dir of a different program", lambda lm, t: _compile(
        lm, t, log_dir=str(_previous_run(t, "prev-program")), student=dspy.ChainOfThought("question -> answer")),
        ValueError, r"different configuration, program or data", r"use a new log_dir"),
    Case("log_dir of a different valset", lambda lm, t: _compile(
        lm, t, log_dir=str(_previous_run(t, "prev-data")), val=toy.make_examples(2, offset=70)),
        ValueError, r"different configuration, program or data", r"use a new log_dir"),
    Case("log_dir of a different configuration", lambda lm, t: _compile(
        lm, t, log_dir=str(_previous_run(t, "prev-config")), candidate_selection_strategy="current_best"),
        ValueError, r"different configuration", r"delete\s+the old one to start over"),
    Case("corrupt state.json", lambda lm, t: ((_previous_run(t, "prev-corrupt") / "state.json").write_text('{"vers')
                                              and _compile(lm, t, log_dir=str(t / "prev-corrupt"))),
         RuntimeError, r"state\.json is corrupt", r"restore it from a backup or start a new log_dir"),
]


@dataclass
class CaseOutcome:
    name: str
    ok: bool
    detail: str


def run_case(case: Case, tmp: Path) -> CaseOutcome:
    lm = scripted_lm(_never, model="scripted/never")
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        case.run(lm, tmp)
    except AssertionError as e:
        return CaseOutcome(case.name, False, f"LM called: {e}")
    except Exception as e:
        msg = str(e)
        calls = len(lm.scripted.calls)
        ok = (isinstance(e, case.exc) and re.search(case.problem, msg) is not None
              and re.search(case.fix, msg) is not None and calls == 0)
        return CaseOutcome(case.name, ok, f"{type(e).__name__}: {msg[:160]} (LM calls: {calls})")
    return CaseOutcome(case.name, False, "no error raised")


# -- metric faults at run time ---------------------------------------------------------------------------

BAD_RETURNS = {"c100": None, "c101": math.nan, "a100": "0.9", "a101": math.inf}   # per validation row id


def run_metric_faults(log_dir: Path) -> dict[str, Any]:
    """A run whose metric misbehaves on some rows: None / NaN / str / inf / raises (a field the example lacks)
    / out of range. Returns what the metric did vs what run.json recorded."""
    did = Counter()

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        rid = gold.id
        if rid in BAD_RETURNS:
            did["bad_return"] += 1
            return BAD_RETURNS[rid]
        if rid == "c102":
            did["raised"] += 1
            return gold.missing_field          # the valset lacks a field the metric reads
        if rid == "a102":
            did["out_of_range"] += 1
            return 7.0
        did["ok"] += 1
        return toy.metric(gold, pred)

    with dspy.context(lm=toy.actor_lm()):
        AdaptiveGEPA(metric, reflection_lm=toy.reflection_lm(vary=True), max_metric_calls=60, progress=False,
                     reflection_minibatch_size=4, skip_perfect_score=False, log_dir=str(log_dir)).compile(
            dspy.Predict("question -> answer"), trainset=toy.make_examples(3), valset=toy.make_examples(3, offset=100))
    run = json.loads((log_dir / "run.json").read_text())
    evals = [json.loads(line)["result"] for line in (log_dir / "evals.jsonl").read_text().splitlines() if line]
    notes = Counter(r["metric_note"].split(" ")[1] if r["metric_note"] else None for r in evals)
    return {"metric": dict(did), "faults": run["faults"], "notes": dict(notes),
            "bad_scores": sorted({r["score"] for r in evals if r["metric_note"]}),
            "out_of_range_scores": sorted({r["score"] for r in evals if r["row_id"] == "a102"}),
            "stop_reason": run["stop_reason"], "spent": run["budget"]["spent"]}
