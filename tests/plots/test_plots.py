"""Each plot function writes a non-trivial PNG."""

from __future__ import annotations

import pytest

from dspy_adaptive.record import plots
from tests.plots.synthetic import LABELS, make_result

MIN_BYTES = 5 * 1024
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _check(path):
    assert path.exists() and path.read_bytes()[:8] == PNG_MAGIC
    assert path.stat().st_size > MIN_BYTES, f"{path.name} is only {path.stat().st_size} bytes"


@pytest.fixture
def result():
    return make_result()


def test_learning_curve(result, tmp_path):
    _check(plots.plot_learning_curve(result, tmp_path / "lc.png"))


def test_routing_heatmap(result, tmp_path):
    _check(plots.plot_routing_heatmap(result, LABELS, tmp_path / "heat.png"))
    _check(plots.plot_routing_heatmap(result, LABELS, tmp_path / "heat4.png", candidate=4))  # has an unknown


def test_lineage(result, tmp_path):
    _check(plots.plot_lineage(result, tmp_path / "sub" / "lineage.png"))


def test_family_scores(result, tmp_path):
    _check(plots.plot_family_scores(result, LABELS, tmp_path / "fam.png"))


def test_write_all_plots(result, tmp_path):
    names = [p.name for p in plots.write_all_plots(result, tmp_path / "a")]
    assert names == ["learning_curve.png", "lineage.png"]
    paths = plots.write_all_plots(result, tmp_path / "b", row_labels=LABELS)
    assert [p.name for p in paths] == ["learning_curve.png", "lineage.png", "routing_heatmap.png",
                                      "family_scores.png"]
    for p in paths:
        _check(p)
