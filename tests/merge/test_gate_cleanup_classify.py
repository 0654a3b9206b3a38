import random

from dspy_adaptive.merge import classify_child, cleanup, gate_passes, select_gate_rows
from dspy_adaptive.program.library import INACTIVE, Library
from tests.merge.builders import lib, spec

A_SCORES = {"a1": 1, "a2": 1, "a3": 1, "b1": 0, "b2": 0, "b3": 0, "t1": .5, "t2": .5, "t3": .5, "only_a": 1}
B_SCORES = {"a1": 0, "a2": 0, "a3": 0, "b1": 1, "b2": 1, "b3": 1, "t1": .5, "t2": .5, "t3": .5, "only_b": 0}


def test_gate_rows_cover_each_bucket_and_only_shared_rows():
    for seed in range(10):
        got = select_gate_rows(A_SCORES, B_SCORES, random.Random(seed))
        assert len(got) == 5 and len(set(got)) == 5
        assert {r[0] for r in got} == {"a", "b", "t"}
        assert sum(r.startswith("a") for r in got) == 2 and sum(r.startswith("b") for r in got) == 2
        assert "only_a" not in got and "only_b" not in got


def test_gate_rows_deterministic_for_a_seed_and_independent_of_dict_order():
    rev_a = dict(reversed(list(A_SCORES.items())))
    assert select_gate_rows(A_SCORES, B_SCORES, random.Random(7)) == select_gate_rows(rev_a, B_SCORES, random.Random(7))
    assert len({select_gate_rows(A_SCORES, B_SCORES, random.Random(s)) for s in range(30)}) > 1


def test_gate_rows_fewer_when_fewer_exist_and_empty_buckets():
    got = select_gate_rows({"x": 1, "y": 1}, {"x": 0, "y": 1, "z": 0}, random.Random(0))
    assert sorted(got) == ["x", "y"]
    only_ties = select_gate_rows(dict.fromkeys("abcdefg", 1), dict.fromkeys("abcdefg", 1), random.Random(0), n=3)
    assert len(only_ties) == 3
    assert select_gate_rows({}, {"x": 1}, random.Random(0)) == ()


def test_gate_threshold_is_match_or_beat():
    assert gate_passes(3.0, 3.0, 2.0)
    assert gate_passes(3.5, 3.0, 2.0)
    assert not gate_passes(2.9, 3.0, 2.0)
    assert not gate_passes(2.9, 2.0, 3.0)


def test_cleanup_deactivates_never_selected_and_keeps_program():
    L = lib(spec("math"), spec("retrieval"), spec("privacy"))
    # slot 2 is selected (even if that selection resolved to the fallback, it counts); slot 3 never
    out, changed = cleanup(L, {"r1": 1, "r2": 2, "r3": 0, "r4": None})
    assert changed == (3,)
    assert not out.slot(3).active and out.slot(3).description == INACTIVE
    assert out.slot(3).program_source == L.slot(3).program_source
    assert out.slot(1) == L.slot(1) and out.slot(2) == L.slot(2)
    same, none = cleanup(L, {"r1": 1, "r2": 2, "r3": 3})
    assert same == L and none == ()


A = lib(spec("math", "a"), spec("privacy", "a"), router="ra")
B = lib(spec("privacy", "b"), spec("math", "b"), router="rb")


def test_classify_pairs_from_both_independent_of_index():
    child = lib(spec("privacy", "b"), spec("math", "a"), router="ra")
    assert classify_child(child, A, B) == "pairs_from_both"


def test_classify_identical_to_parent_even_if_reordered():
    assert classify_child(A, A, B) == "identical_to_parent"
    reordered = lib(spec("math", "b"), spec("privacy", "b"), router="rb")
    assert classify_child(reordered, A, B) == "identical_to_parent"


def test_classify_inactive_code_only():
    child = A.with_slot(4, A.slot(4).with_program("class Old(dspy.Module): ..."))
    assert classify_child(child, A, B) == "inactive_code_only"
    cleaned = Library(router="ra", slots=(A.slot(1), A.slot(2).deactivated(), *A.slots[2:]))
    assert classify_child(cleaned, lib(spec("math", "a"), router="ra"), B) == "inactive_code_only"


def test_classify_router_only_and_other():
    assert classify_child(A.with_router("new router"), A, B) == "router_only"
    assert classify_child(lib(spec("math", "c"), router="ra"), A, B) == "other"
    # pairs from one parent only plus a new one -> other
    assert classify_child(lib(spec("math", "a"), spec("writing"), router="ra"), A, B) == "other"
