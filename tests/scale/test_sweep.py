"""benchmarks.sweep: (method, seed, budget) cells as Ray tasks on a local Ray, resumable."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SHARED_DATA

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


EXTRA = ["--", "--scripted", "--data", str(SHARED_DATA), "--sizes", "2,2,2", "--num-threads", "2", "--no-progress"]


def test_a_two_cell_sweep_runs_resumes_and_reports(tmp_path, capsys, shared_data):
    from benchmarks import sweep

    out = tmp_path / "sweep"
    argv = ["--methods", "seed,one-shot", "--seeds", "0", "--budgets", "40", "--out", str(out), "--no-progress",
            *EXTRA]
    assert sweep.main(argv) == 0
    cells = json.loads((out / "sweep.json").read_text())["cells"]
    assert len(cells) == 2 and all(c["finished"] for c in cells)
    assert (out / "protocol-40" / "protocol.md").exists() and (out / "compare-40" / "tables.md").exists()
    one_shot = out / "one-shot" / "budget-40" / "seed-0" / "results.json"
    seed = out / "seed" / "budget-40" / "seed-0" / "results.json"
    kept = seed.stat().st_mtime_ns
    one_shot.unlink()                                        # as if the sweep was killed before this cell ended
    capsys.readouterr()
    assert sweep.main(argv) == 0
    assert "1 finished (skipped), 1 to run" in capsys.readouterr().out
    assert one_shot.exists() and seed.stat().st_mtime_ns == kept   # only the unfinished cell ran again


def test_bad_options_are_refused(tmp_path):
    from benchmarks import sweep
    with pytest.raises(SystemExit, match="unknown"):
        sweep.main(["--methods", "magic", "--budgets", "10", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--seeds"):
        sweep.main(["--methods", "seed", "--seeds", "a,b", "--budgets", "10", "--out", str(tmp_path)])
