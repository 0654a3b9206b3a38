"""notebooks/explore_run.ipynb runs top to bottom on a run directory (RUN_DIR) without errors."""

from __future__ import annotations

import os

import nbformat
import pytest

from tests.plots.synthetic import NOTEBOOK, execute_notebook, make_run_dir


def test_committed_notebook_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None


@pytest.mark.parametrize("with_labels", [True, False])
def test_notebook_executes(tmp_path, monkeypatch, with_labels):
    run_dir = make_run_dir(tmp_path)
    if not with_labels:
        (run_dir / "labels.json").unlink()
    outputs = execute_notebook(run_dir, tmp_path, monkeypatch)
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == (4 if with_labels else 2)
    figures = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {"learning_curve.png", "lineage.png"} <= figures
    assert os.environ["RUN_DIR"] == str(run_dir)


def test_nbconvert_runs_it_as_the_readme_says_from_the_checkout(tmp_path):
    """`RUN_DIR=runs/demo jupyter nbconvert --execute notebooks/explore_run.ipynb` from where the user stands: the
    kernel runs in notebooks/, the relative RUN_DIR is read from the user's directory, and it says which run."""
    import json
    import subprocess
    import sys

    from dspy_adaptive.record.run_record import write_run_record
    from tests.plots.synthetic import make_result

    write_run_record(make_result(), tmp_path / "runs" / "demo" / "search")
    (tmp_path / "notebooks").mkdir()
    notebook = tmp_path / "notebooks" / "explore_run.ipynb"
    notebook.write_text(NOTEBOOK.read_text())
    env = {**os.environ, "RUN_DIR": "runs/demo", "PWD": str(tmp_path), "PLOTS_DIR": str(tmp_path / "figures"),
           "PYTHONPATH": str(NOTEBOOK.parents[1]), "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                           "notebooks/explore_run.ipynb", "--output", "executed.ipynb"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    executed = json.loads((tmp_path / "notebooks" / "executed.ipynb").read_text())
    printed = "".join("".join(o.get("text", "")) for c in executed["cells"] if c["cell_type"] == "code"
                      for o in c.get("outputs", []))
    assert f"opened $RUN_DIR=runs/demo: {tmp_path / 'runs' / 'demo' / 'search'}" in printed
