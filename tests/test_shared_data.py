"""A user's clone passes its tests without the benchmark samples (tests that read them skip, saying where the samples
go), while CI refuses to run without them (issue 28)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import tests.conftest as conftest

REPO = Path(__file__).resolve().parents[1]


def test_a_missing_sample_folder_skips_with_one_line_saying_where_it_goes(monkeypatch, tmp_path):
    monkeypatch.setattr(conftest, "SHARED_DATA", tmp_path / "shared" / "data")
    monkeypatch.setattr(conftest, "REQUIRED", False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        conftest.require_shared_data()
    message = str(skipped.value)
    assert "\n" not in message and str(tmp_path / "shared" / "data") in message and "put them in" in message


def test_in_ci_a_missing_sample_folder_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(conftest, "SHARED_DATA", tmp_path / "shared" / "data")
    monkeypatch.setattr(conftest, "REQUIRED", True)
    with pytest.raises(pytest.fail.Exception, match="benchmark samples missing"):
        conftest.require_shared_data()


def test_ci_refuses_to_start_without_the_samples(tmp_path):
    clone = tmp_path / "clone"
    (clone / ".ci").mkdir(parents=True)
    shutil.copy(REPO / ".ci" / "run", clone / ".ci" / "run")
    proc = subprocess.run(["bash", str(clone / ".ci" / "run")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"CI needs the benchmark samples in {tmp_path}/shared/data" in proc.stderr
    assert not (clone / ".venv").exists()                 # refused before installing anything
