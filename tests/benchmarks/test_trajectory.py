"""Trajectory diagnostics (normalised edit, section breadth, churn) and item-level overlap on hand-made cases."""

from __future__ import annotations

import json

import pytest

from benchmarks import trajectory as tj


def test_normalised_edit_is_token_levenshtein_over_the_longer_state():
    a = {"router": "route by topic"}
    b = {"router": "route by capability"}
    assert tj.tokens(a) == ["§router", "route", "by", "topic"]
    assert tj.normalised_edit(a, b) == pytest.approx(1 / 4)
    assert tj.normalised_edit(a, a) == 0.0 and tj.normalised_edit({}, {}) == 0.0


def test_section_breadth_counts_changed_added_and_removed_sections():
    a = {"router": "r", "slot1.description": "maths", "slot1.program": "p1"}
    b = {"router": "r", "slot1.description": "math and logic", "slot2.program": "p2"}
    # union: router (same), slot1.description (changed), slot1.program (removed), slot2.program (added)
    assert tj.section_breadth(a, b) == pytest.approx(3 / 4)


def test_churn_is_the_editing_that_did_not_survive():
    s0, s1, s2 = {"t": "a b c"}, {"t": "a b c d e"}, {"t": "a b c"}
    assert tj.churn([s0, s1, s2]) == pytest.approx(1.0)          # everything added was taken back
    assert tj.churn([s0, s1]) == pytest.approx(0.0)              # one step: all of it survived
    s3 = {"t": "a b c d"}
    # steps: +2 tokens, -1 token = 3; net: +1 token -> churn 1 - 1/3
    assert tj.churn([s0, s1, s3]) == pytest.approx(1 - 1 / 3)


def test_path_metrics_drop_byte_identical_states():
    s0, s1 = {"router": "x"}, {"router": "x y"}
    p = tj.path_metrics([s0, s0, s1, s1])
    assert p["committed_states"] == 2 and p["updates"] == 1 and p["max_section_breadth"] == 1.0


def test_item_metrics_match_the_definitions():
    items = {"1", "2", "3", "4", "5"}
    c0, ca, cb = {"1"}, {"1", "2", "3"}, {"1", "3", "4"}
    m = tj.item_metrics(c0, ca, cb, items)
    # agreement: 1 (both), 2 (a only: no), 3 (both), 4 (b only: no), 5 (neither): 3/5
    assert m["agreement"] == pytest.approx(3 / 5) and m["behaviour_distance"] == pytest.approx(2 / 5)
    assert m["J_C"] == pytest.approx(2 / 4)                     # {1,3} / {1,2,3,4}
    assert m["J_G"] == pytest.approx(1 / 3)                     # {3} / {2,3,4}
    assert tj.item_metrics(c0, c0, c0, items)["J_G"] == 1.0     # two empty gain sets


def library(router, *slots):
    return {"router": router, "slots": [{"description": d, "program_source": p, "active": True, "profile": "fast"}
                                        for d, p in slots]}


def test_two_runs_from_their_records(tmp_path):
    def run(name, scores, candidates=None, parents=None, spec=None):
        d = tmp_path / name
        (d / "search").mkdir(parents=True)
        rows = [{"id": k, "family": "qa", "score": v} for k, v in scores.items()]
        (d / "results.json").write_text(json.dumps({"method": name, "test": rows, "spec": spec or {}}))
        if candidates is not None:
            (d / "search" / "run.json").write_text(json.dumps({"candidates": candidates, "parents": parents,
                                                                "best_idx": len(candidates) - 1}))
        return d

    seed = run("seed", {"a": 1.0, "b": 0.0, "c": 0.0})
    adaptive = run("adaptive", {"a": 1.0, "b": 1.0, "c": 0.0},
                   candidates=[library("r"), library("r", ("maths", "p1")), library("r2", ("maths", "p2"))],
                   parents=[[None], [0], [1]])
    oneshot = run("one-shot", {"a": 1.0, "b": 1.0, "c": 1.0}, spec={"library": library("r", ("all", "p"))})
    report = tj.compare_runs(adaptive, oneshot, seed)
    assert report["path"][str(adaptive)]["committed_states"] == 3
    assert report["path"][str(oneshot)]["committed_states"] == 2
    assert report["items"] == {"agreement": pytest.approx(2 / 3), "behaviour_distance": pytest.approx(1 / 3),
                               "J_C": pytest.approx(2 / 3), "J_G": pytest.approx(1 / 2)}
    assert tj.main([str(adaptive), str(oneshot), "--seed-run", str(seed), "--out", str(tmp_path / "t")]) == 0
    assert "J_C 0.667" in (tmp_path / "t" / "trajectory.md").read_text()
