"""The exploration notebook on a genuine run record: a scripted-LM AdaptiveGEPA run with a merge."""

from __future__ import annotations

from pathlib import Path

import dspy
import nbformat
from nbclient import NotebookClient

from dspy_adaptive import AdaptiveGEPA
from dspy_adaptive.analysis import write_labels
from tests.core import toy

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "explore_run.ipynb"


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
    run_dir = make_real_run_dir(tmp_path)
    monkeypatch.setenv("RUN_DIR", str(run_dir))
    monkeypatch.setenv("PLOTS_DIR", str(tmp_path / "figures"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=180, resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/markdown", ""))
                   for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert toy.REV_DESCRIPTION in text and toy.ARITH_DESCRIPTION in text   # the merged library is shown
    assert (tmp_path / "figures" / "lineage.png").stat().st_size > 5000
