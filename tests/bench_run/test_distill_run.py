"""`benchmarks.run --distill-router`: the distilled router measured on test against the LM router (scripted LMs)."""

from __future__ import annotations

import json

import pytest

from benchmarks import run as bench
from benchmarks.distill import paired_scores, score_summary
from tests.conftest import SHARED_DATA

SMALL = ["--scripted", "--data", str(SHARED_DATA), "--sizes", "8,8,6", "--num-threads", "4", "--no-progress",
         "--seed", "43", "--budget", "100"]


@pytest.fixture(scope="module")
def adaptive(tmp_path_factory):
    out = tmp_path_factory.mktemp("distill") / "adaptive"
    bench.main(["--method", "adaptive", "--out", str(out)] + SMALL)            # without the flag first
    assert "distill" not in json.loads((out / "results.json").read_text())
    bench.main(["--method", "adaptive", "--out", str(out), "--distill-router"] + SMALL)
    return out


def test_a_finished_run_rerun_with_the_flag_runs_only_the_distill_phase(adaptive, capsys):
    res = json.loads((adaptive / "results.json").read_text())
    assert res["config"]["distill_router"] is True
    bench.main(["--method", "adaptive", "--out", str(adaptive), "--distill-router"] + SMALL)
    printed = capsys.readouterr().out
    assert "[search] already finished" in printed and "[distill] already finished" in printed


def test_the_distilled_router_is_measured_against_the_lm_router_on_test(adaptive):
    res = json.loads((adaptive / "results.json").read_text())
    d = res["distill"]
    assert d["built"], d.get("reason")
    r, s = d["routing"], d["scores"]
    n = len(res["test"])
    assert r["requests"] == n and r["router_calls_lm"] == n                   # one LM router call per request
    assert r["router_calls_distilled"] == round(r["share_lm_router"] * n)     # only the deferred ones pay it
    assert r["router_calls_saved"] + r["router_calls_distilled"] == n
    assert 0 < r["router_tokens_saved"] <= r["router_tokens_lm"]
    assert r["latency_ms_lm"] > 0 and r["latency_ms_distilled"] > 0
    assert r["agreement"] >= 0.8                                             # tiny splits; the full run is 98.5%
    served = {p["id"]: p for p in d["per_request"]}
    assert r["agreement"] == pytest.approx(sum(p["served"] == p["lm"] for p in served.values()) / n)
    assert all(p["served"] == p["lm"] for p in served.values() if p["deferred"])
    # the paired score: every test request, rerun only where the route differs from the test phase's
    by_id = {row["id"]: row for row in res["test"]}
    assert {row["id"] for row in d["test"]} == set(by_id)
    for row in d["test"]:
        assert row["lm_score"] == by_id[row["id"]]["score"]
        assert row["rerun"] == (row["route"] != by_id[row["id"]]["route"])
        if not row["rerun"]:
            assert row["score"] == row["lm_score"]
    assert s["paired"]["n"] == n and s["rerun"] == sum(row["rerun"] for row in d["test"])
    saved = json.loads((adaptive / "distilled_router.json").read_text())
    assert saved["format"] == "dspy_adaptive.distilled_router" and saved["threshold"] == r["threshold"]
    text = (adaptive / "tables.md").read_text()
    assert "Example mean, distilled router (--distill-router)" in text
    assert "## Distilled router (--distill-router): against the LM router on test" in text
    compared = bench.compare([str(adaptive)], None)
    assert "## Distilled router (--distill-router) (test)" in compared


def test_a_method_without_an_lm_router_says_so(tmp_path):
    out = tmp_path / "seed"
    bench.main(["--method", "seed", "--out", str(out), "--distill-router"] + SMALL)
    d = json.loads((out / "results.json").read_text())["distill"]
    assert d == {"built": False, "reason": d["reason"]} and "no LM router" in d["reason"]
    assert "not built" in (out / "tables.md").read_text()


def test_paired_scores_reuse_a_score_only_where_the_route_is_the_same():
    test_rows = [{"id": "a", "family": "f", "score": 1.0, "route": 1}, {"id": "b", "family": "f", "score": 0.0,
                                                                         "route": 0},
                 {"id": "c", "family": "g", "score": 0.5, "route": 2}]
    rows = paired_scores(test_rows, {"a": 1, "b": 2, "c": 2}, {"b": {"score": 1.0}})
    assert [(r["lm_score"], r["score"], r["rerun"]) for r in rows] == [(1.0, 1.0, False), (0.0, 1.0, True),
                                                                        (0.5, 0.5, False)]
    s = score_summary(rows)
    assert s["lm"] == pytest.approx(0.5) and s["distilled"] == pytest.approx(2.5 / 3) and s["rerun"] == 1
    assert s["paired"]["wins"] == 1 and s["paired"]["ties"] == 2 and set(s["by_family"]) == {"f", "g"}
