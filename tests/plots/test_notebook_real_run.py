"""The exploration notebook on a genuine run record: a scripted-LM AdaptiveGEPA run with a merge."""

from __future__ import annotations

from pathlib import Path

import dspy

from dspy_adaptive import AdaptiveGEPA
from dspy_adaptive.record.analysis import write_labels
from tests.core import toy
from tests.plots.synthetic import execute_notebook


def make_real_run_dir(tmp_path: Path) -> Path:
    run_dir = Path(tmp_path) / "runs" / "scripted"
    train, val = toy.make_examples3(4), toy.make_examples3(4, offset=100)
    with dspy.context(lm=toy.scripted_lm(toy.router3_respond)):
        AdaptiveGEPA(toy.metric, reflection_lm=toy.branching_reflection_lm(), max_metric_calls=150,
                     reflection_minibatch_size=3, seed=1, use_merge=True, merge_cadence=2, progress=False,
                     log_dir=str(run_dir)).compile(dspy.Predict("question -> answer"), trainset=train, valset=val)
    family = {"a": "add", "r": "reverse", "c": "caps"}
    write_labels({e.id: family[e.id[0]] for e in val}, run_dir)
    return run_dir


def test_notebook_executes_on_a_real_run(tmp_path, monkeypatch):
    outputs = execute_notebook(make_real_run_dir(tmp_path), tmp_path, monkeypatch)
    text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/markdown", "")) for o in outputs)
    assert toy.REV_DESCRIPTION in text and toy.ARITH_DESCRIPTION in text   # the merged library is shown
    assert (tmp_path / "figures" / "lineage.png").stat().st_size > 5000
