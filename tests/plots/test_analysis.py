"""analysis.py on the hand-built run in synthetic.py (numbers computed by hand in the comments)."""

from __future__ import annotations

import json

import pytest

from dspy_adaptive.record import analysis
from dspy_adaptive.record.run_record import load_run, write_run_record
from tests.plots.synthetic import LABELS, make_result, make_run_dir


@pytest.fixture
def result():
    return make_result()


def test_routing_table_defaults_to_best(result):
    # best #3: a0-a2 -> slot 1, a3 -> slot 2; c0-c2 -> slot 2, c3 -> fallback
    assert analysis.routing_table(result, LABELS) == {"arith": {1: 3, 2: 1}, "caps": {0: 1, 2: 3}}
    assert analysis.routing_table(result, LABELS, candidate=0) == {"arith": {0: 4}, "caps": {0: 4}}


def test_routing_table_selected_and_unknown(result):
    assert analysis.routing_table(result, LABELS, source="selected") == {"arith": {1: 3, 2: 1}, "caps": {2: 4}}
    assert analysis.routing_table(result, LABELS, candidate=4) == {"arith": {1: 4}, "caps": {0: 3, None: 1}}


def test_routing_table_skips_unlabelled_rows(result):
    assert analysis.routing_table(result, {"a0": "arith", "c3": "caps"}) == {"arith": {1: 1}, "caps": {0: 1}}


def test_majority_mapping_agreement_best(result):
    table = analysis.routing_table(result, LABELS)
    # slot 1 -> arith (3 rows), slot 2 -> caps (3 vs 1), fallback 0 -> caps (1)
    assert analysis.slot_majority(table) == {0: "caps", 1: "arith", 2: "caps"}
    per_label, overall = analysis.majority_mapping_agreement(table)
    assert per_label == {"arith": 75.0, "caps": 100.0}        # a3 sits on a caps slot
    assert overall == pytest.approx(87.5)                      # 7 of 8 rows


def test_majority_agreement_unknown_counts_as_miss_and_ties(result):
    per_label, overall = analysis.majority_mapping_agreement(analysis.routing_table(result, LABELS, candidate=4))
    assert per_label == {"arith": 100.0, "caps": 75.0} and overall == pytest.approx(87.5)
    per_label, overall = analysis.majority_mapping_agreement({"x": {0: 2}, "y": {0: 2}})
    assert per_label == {"x": 100.0, "y": 0.0} and overall == 50.0  # tie -> alphabetical first
    assert analysis.majority_mapping_agreement({}) == ({}, 0.0)


def test_per_family_scores(result):
    assert analysis.per_family_scores(result, LABELS) == {"arith": 0.75, "caps": 1.0}
    assert analysis.per_family_scores(result, LABELS, candidate=0) == {"arith": 0.0, "caps": 1.0}
    assert analysis.per_family_scores(result, LABELS, candidate=2) == {"arith": 0.25, "caps": 1.0}


def test_lineage_edges_include_both_merge_edges(result):
    edges = analysis.lineage_edges(result)
    assert edges == [(0, 1, "reflect"), (0, 2, "reflect"), (1, 3, "merge"), (2, 3, "merge"), (1, 4, "reflect")]


def test_ancestry_and_generations(result):
    assert analysis.ancestry(result, 3) == {0, 1, 2}
    assert analysis.ancestry(result, 4) == {0, 1}
    assert analysis.ancestry(result, 0) == set()
    assert analysis.generations(result) == [0, 1, 1, 2, 2]


def test_out_of_range_candidate(result):
    with pytest.raises(IndexError):
        analysis.routing_table(result, LABELS, candidate=9)


def test_labels_round_trip_and_run_dir_resolution(tmp_path, monkeypatch):
    assert analysis.load_labels(tmp_path) is None
    run_dir = make_run_dir(tmp_path)
    assert analysis.load_labels(run_dir) == LABELS
    assert json.loads((run_dir / "labels.json").read_text())["a0"] == "arith"
    # survives the JSON round trip (row ids stay strings, slot ids stay ints)
    assert analysis.routing_table(load_run(run_dir), LABELS) == {"arith": {1: 3, 2: 1}, "caps": {0: 1, 2: 3}}

    newer = write_run_record(make_result(), tmp_path / "runs" / "later")
    monkeypatch.delenv("RUN_DIR", raising=False)
    assert analysis.latest_run_dir(tmp_path / "runs") == newer
    assert analysis.resolve_run_dir(search_from=tmp_path / "notebooks") == newer.resolve()
    monkeypatch.setenv("RUN_DIR", str(run_dir))
    assert analysis.resolve_run_dir() == run_dir.resolve()


def test_markdown_helpers(result):
    text = analysis.routing_markdown(analysis.routing_table(result, LABELS))
    assert "| family | fallback | slot 1 | slot 2 | agreement |" in text and "87.5%" in text
    lib_md = analysis.library_markdown(result.best_candidate)
    assert "Slot 1" in lib_md and "Slot 2" in lib_md and "class Caps" in lib_md and "`deep`" in lib_md
    rows = analysis.proposals_by_action(result)
    assert ["merge", 1, 1, "100%"] in rows and ["rewrite_router", 1, 0, "0%"] in rows and rows[-1][0] == "(skip)"
    assert len(analysis.proposal_rows(result)) == 6


def test_a_demo_out_folder_opens_its_search_run(tmp_path, monkeypatch):
    run_dir = write_run_record(make_result(), tmp_path / "demo" / "search")
    monkeypatch.setenv("RUN_DIR", str(tmp_path / "demo"))
    assert analysis.resolve_run_dir() == run_dir.resolve()
    monkeypatch.setenv("RUN_DIR", str(run_dir))
    assert analysis.resolve_run_dir() == run_dir.resolve()
    monkeypatch.setenv("RUN_DIR", str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="--out folder"):
        analysis.resolve_run_dir()


def test_a_relative_run_dir_is_read_from_where_the_user_started_jupyter(tmp_path, monkeypatch):
    demo = write_run_record(make_result(), tmp_path / "runs" / "demo" / "search")
    write_run_record(make_result(), tmp_path / "runs" / "newer")                    # newer, but not the demo
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")                                       # where the kernel runs
    monkeypatch.setenv("PWD", str(tmp_path))                                        # where the user stood
    monkeypatch.setenv("RUN_DIR", "runs/demo")
    found, how = analysis.open_run_dir()
    assert found == demo.resolve() and "RUN_DIR=runs/demo" in how and str(demo.resolve()) in how
    monkeypatch.delenv("RUN_DIR")                                                   # no RUN_DIR: the demo, said so
    found, how = analysis.open_run_dir()
    assert found == demo.resolve() and "the demo's run" in how and "set it to open another run" in how
    monkeypatch.setenv("RUN_DIR", "runs/nothing")
    with pytest.raises(FileNotFoundError, match=f"looked in {tmp_path}/runs/nothing"):
        analysis.open_run_dir()
