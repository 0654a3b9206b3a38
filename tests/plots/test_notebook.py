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
