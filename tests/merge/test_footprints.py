import json

from dspy_adaptive.merge import footprints, jaccard_matrix, selected_slots, unknown_rows
from tests.merge.builders import lib, spec

L = lib(spec("math"), None, spec("retrieval"))


def test_executed_slots_only_fallback_not_counted():
    ex = {"r1": 1, "r2": 3, "r3": 0, "r4": 1}
    fp = footprints(L, ex, ["r1", "r2", "r3", "r4"])
    assert fp == {1: frozenset({"r1", "r4"}), 3: frozenset({"r2"})}


def test_active_slot_without_traffic_gets_empty_set():
    fp = footprints(L, {"r1": 1}, ["r1"])
    assert fp == {1: frozenset({"r1"}), 3: frozenset()}


def test_matched_by_id_not_position():
    ex = {"b": 3, "a": 1}  # order of records irrelevant
    assert footprints(L, ex, ["a", "b"]) == footprints(L, {"a": 1, "b": 3}, ["b", "a"])
    assert footprints(L, ex, ["a", "b"])[1] == frozenset({"a"})


def test_missing_row_means_footprint_missing():
    assert footprints(L, {"r1": 1}, ["r1", "r2"]) is None
    assert footprints(L, {"r1": 1, "r2": "1"}, ["r1", "r2"]) is None     # not a slot number


def test_unknown_route_is_left_out_and_the_rest_still_counts():
    """Issue 15 item 6: one router exception (executed None) no longer drops the whole footprint."""
    ex = {"r1": 1, "r2": None, "r3": 3, "r4": 0}
    assert footprints(L, ex, ["r1", "r2", "r3", "r4"]) == {1: frozenset({"r1"}), 3: frozenset({"r3"})}
    assert unknown_rows(ex, ["r1", "r2", "r3", "r4"]) == ["r2"]


def test_record_naming_non_active_slot_is_a_mismatch():
    assert footprints(L, {"r1": 2}, ["r1"]) is None   # slot 2 inactive in L
    assert footprints(L, {"r1": 9}, ["r1"]) is None


def test_records_outside_rows_ignored():
    assert footprints(L, {"r1": 1, "zz": 3}, ["r1"]) == {1: frozenset({"r1"}), 3: frozenset()}


def test_selected_slots_ignores_fallback_and_unknown():
    assert selected_slots({"a": 0, "b": 2, "c": None, "d": 2, "e": 4}) == frozenset({2, 4})


def test_jaccard_values_empty_union_and_json():
    fa = {1: frozenset({"a", "b"}), 2: frozenset()}
    fb = {1: frozenset({"b", "c"}), 4: frozenset()}
    jm = jaccard_matrix(fa, fb)
    assert jm.rows == (1, 2) and jm.cols == (1, 4)
    assert jm.get(1, 1) == 1 / 3
    assert jm.get(2, 4) == 0.0          # empty union
    assert jm.get(1, 4) == 0.0
    assert jm.get(3, 1) == 0.0          # not a row: no footprint
    d = json.loads(json.dumps(jm.to_dict()))
    assert d == {"rows": [1, 2], "cols": [1, 4], "values": [[1 / 3, 0.0], [0.0, 0.0]]}
