"""A fresh selection split: finalists by validation re-scored on held-apart requests; both picks on test."""

from __future__ import annotations

import json

import dspy
import pytest

from benchmarks import run as bench
from benchmarks.selection import carve, finalists, select
from tests.conftest import SHARED_DATA


def rows(n_per_family):
    return [dspy.Example(id=f"{f}-{i}", family=f) for f in ("a", "b") for i in range(n_per_family)]


def test_carve_moves_n_per_family_out_of_validation():
    val, sel = carve(rows(5), 2, seed=0)
    assert len(val) == 6 and len(sel) == 4 and {e.family for e in sel} == {"a", "b"}
    assert not {e.id for e in val} & {e.id for e in sel}
    assert carve(rows(5), 2, seed=0)[1] == sel                     # the seed fixes it
    with pytest.raises(ValueError, match="leave at least one"):
        carve(rows(2), 2, seed=0)


def test_the_fresh_split_can_overrule_validation():
    assert finalists([0.5, 0.9, 0.9, 0.1], 3) == [1, 2, 0]
    calls = []

    def score(idx, rollout):            # candidate 2 is really better; 1 was lucky on validation
        calls.append((idx, rollout))
        return {1: [0.2, 0.4], 2: [0.8, 1.0], 0: [0.5, 0.5]}[idx]

    res = select([0.5, 0.9, 0.9, 0.1], 3, 2, score)
    assert res.validation_pick == 1 and res.selection_pick == 2
    assert res.selection_means == [pytest.approx(0.3), pytest.approx(0.9), pytest.approx(0.5)]
    assert len(calls) == 3 * 2                                     # every finalist, every rollout


def test_a_scripted_run_reports_both_picks_on_test(tmp_path):
    out = tmp_path / "sel"
    bench.main(["--method", "adaptive", "--budget", "80", "--out", str(out), "--scripted", "--data", str(SHARED_DATA),
                "--sizes", "4,4,4", "--num-threads", "4", "--no-progress", "--selection-split", "1",
                "--finalists", "2"])
    res = json.loads((out / "results.json").read_text())
    sel = res["selection"]
    assert sel["selection_rows"] == 4 and len(sel["finalists"]) <= 2
    assert 0.0 <= sel["test_validation_pick"] <= 1.0 and 0.0 <= sel["test_selection_pick"] <= 1.0
    assert len(json.loads((out / "labels.json").read_text())) == 12       # validation lost the 4 held apart
    assert "Fresh selection split" in (out / "tables.md").read_text()
    with pytest.raises(SystemExit, match="applies to --method adaptive"):
        bench.main(["--method", "seed", "--out", str(tmp_path / "x"), "--scripted", "--data", str(SHARED_DATA),
                    "--selection-split", "1"])


def test_the_audit_ablation_rescores_a_finished_run_with_and_without_planted_answers(tmp_path):
    from benchmarks import audit
    from benchmarks.data import load_mixture

    out = tmp_path / "run"
    bench.main(["--method", "adaptive", "--budget", "60", "--out", str(out), "--scripted", "--data", str(SHARED_DATA),
                "--sizes", "2,2,2", "--num-threads", "4", "--no-progress"])
    record = out / "search" / "run.json"
    run = json.loads(record.read_text())
    families = ("hotpotqa", "aime", "pupa", "livebench_if")
    mix = load_mixture("local", data_dir=SHARED_DATA, seed=43, sizes=dict.fromkeys(families, (2, 2, 2)))
    gold = next(ex for ex in mix.train if ex.family == "hotpotqa")
    best = run["candidates"][run["best_idx"]]
    best["router"] += f" Remember: the answer is {gold.answer}."            # a memorised training answer
    record.write_text(json.dumps(run))
    assert audit.main([str(out), "--ablate"]) == 0
    report = json.loads((out / "audit.json").read_text())["summary"]
    assert gold.id in report["rows"] and report["by_candidate"][str(run["best_idx"])] >= 1
    abl = report["ablation"]
    assert abl["train"]["rows"] >= 1 and abl["test"]["rows"] == len(mix.test)
    assert abl["train"]["with"] is not None and abl["test"]["without"] is not None
    assert "## Ablation on the selected library" in (out / "audit.md").read_text()
