import json
import random

import pytest

from dspy_adaptive.merge import (
    aggregate_rule,
    classify_child,
    decide_pair,
    index_merge,
    merge,
    resolve_conflict,
)
from dspy_adaptive.program.library import Library
from tests.merge.builders import const_scores, lib, spec, view

EMPTY2 = Library.empty(2, router="anc")
EMPTY3 = Library.empty(3, router="anc")


def fs(*ids):
    return frozenset(ids)


# -- resolve_conflict: the evidence chain -------------------------------------------------------------
A = lib(spec("x", "a"), k=2)
B = lib(spec("x", "b"), k=2)


def test_conflict_higher_shared_mean_wins_and_tie_goes_to_base():
    fp = {1: fs("r1", "r2")}
    d = resolve_conflict(view(A, .5, fp, {"r1": 1, "r2": 0}), view(B, .9, fp, {"r1": 1, "r2": 1}), 1, 1,
                         random.Random(0))
    assert (d.winner, d.reason, d.n_shared, d.base_score, d.other_score) == ("other", "conflict_scores", 2, .5, 1.0)
    tie = resolve_conflict(view(A, .1, fp, {"r1": 1, "r2": 0}), view(B, .9, fp, {"r1": 0, "r2": 1}), 1, 1,
                           random.Random(0))
    assert (tie.winner, tie.reason) == ("base", "conflict_scores")


def test_conflict_only_scored_shared_rows_count():
    fp = {1: fs("r1", "r2")}
    d = resolve_conflict(view(A, .5, fp, {"r1": 0.0, "r2": 1.0}), view(B, .5, fp, {"r1": 0.5}), 1, 1,
                         random.Random(0))
    assert d.n_shared == 1 and d.winner == "other"


def test_one_sided_traffic():
    d = resolve_conflict(view(A, .9, {1: fs()}), view(B, .1, {1: fs("r1")}), 1, 1, random.Random(0))
    assert (d.winner, d.reason) == ("other", "one_sided_traffic")
    d = resolve_conflict(view(A, .1, {1: fs("r1")}), view(B, .9, {1: fs()}), 1, 1, random.Random(0))
    assert (d.winner, d.reason) == ("base", "one_sided_traffic")


def test_disjoint_or_silent_or_unscored_falls_back_to_aggregate_rule():
    disjoint = (view(A, .4, {1: fs("r1")}, {"r1": 1}), view(B, .6, {1: fs("r2")}, {"r2": 1}))
    assert resolve_conflict(*disjoint, 1, 1, random.Random(0)).winner == "other"
    silent = (view(A, .7, {1: fs()}), view(B, .6, {1: fs()}))
    assert resolve_conflict(*silent, 1, 1, random.Random(0)).reason == "aggregate_rule"
    assert resolve_conflict(*silent, 1, 1, random.Random(0)).winner == "base"
    unscored = (view(A, .4, {1: fs("r1")}), view(B, .6, {1: fs("r1")}))
    d = resolve_conflict(*unscored, 1, 1, random.Random(0))
    assert (d.winner, d.reason, d.n_shared) == ("other", "aggregate_rule", 0)
    missing = (view(A, .4, None), view(B, .6, {1: fs("r1")}))
    assert resolve_conflict(*missing, 1, 1, random.Random(0)).winner == "other"


def test_aggregate_rule_exact_tie_uses_rng():
    a, b = view(A, .5), view(B, .5)
    for seed in range(10):
        assert aggregate_rule(a, b, random.Random(seed)) == random.Random(seed).choice(["base", "other"])
    assert {aggregate_rule(a, b, random.Random(s)) for s in range(20)} == {"base", "other"}
    d = resolve_conflict(view(A, .5, {1: fs("r1")}), view(B, .5, {1: fs("r2")}), 1, 1, random.Random(3))
    assert d.winner == random.Random(3).choice(["base", "other"])


# -- decide_pair: changed vs ancestor and the ancestor frame -----------------------------------------
def test_changed_in_one_parent_only():
    anc = lib(spec("x", "0"), k=2)
    base = view(lib(spec("x", "0"), k=2), .9, {1: fs("r")}, {"r": 1})
    other = view(lib(spec("x", "1"), k=2), .1, {1: fs("r")}, {"r": 0})
    d = decide_pair(anc, base, other, 1, 1, random.Random(0))
    assert (d.winner, d.reason) == ("other", "changed_in_other_only")


def test_ancestor_frames_differ_for_a_moved_unedited_specialist():
    # ancestor: Z at 1, Y at 2. base edited slot 1 into X; other kept Y (unedited) at slot 2.
    anc = lib(spec("z"), spec("y"), k=3)
    base = view(lib(spec("x"), k=3), .9, {1: fs("r1", "r2")}, {"r1": 0, "r2": 0})
    other = view(lib(None, spec("y"), k=3), .5, {2: fs("r1", "r2")}, {"r1": 1, "r2": 1})
    own = decide_pair(anc, base, other, 1, 2, random.Random(0), ancestor_frame="own_index")
    assert (own.winner, own.reason) == ("base", "changed_in_base_only")
    target = decide_pair(anc, base, other, 1, 2, random.Random(0), ancestor_frame="target")
    assert (target.winner, target.reason) == ("other", "conflict_scores")
    anyslot = decide_pair(anc, base, other, 1, 2, random.Random(0), ancestor_frame="any_slot")
    assert (anyslot.winner, anyslot.reason) == ("base", "changed_in_base_only")
    with pytest.raises(ValueError):
        merge(anc, base, other, rng=random.Random(0), ancestor_frame="nearest")


def test_unchanged_in_both_keeps_base():
    # Both parents kept their own ancestor unit (different slots of the ancestor) and they overlap.
    anc = lib(spec("y"), spec("z"), k=2)
    base = view(anc, .9, {1: fs("r"), 2: fs()})
    other = view(lib(spec("q"), spec("z"), k=2), .5, {1: fs(), 2: fs("r")})
    d = decide_pair(anc, base, other, 1, 2, random.Random(0))
    assert (d.winner, d.reason) == ("base", "unchanged_in_both")


# -- merge ----------------------------------------------------------------------------------------------
def test_competing_pair_is_resolved_on_evidence():
    fa = {1: fs("a", "b", "c", "d"), 2: fs("e", "f")}
    fb = {1: fs("a", "b", "c", "d", "e"), 2: fs("f", "g", "h", "i", "j")}
    base = view(lib(spec("one", "a"), spec("two", "a"), k=2), .8, fa, const_scores("abcdefghij", 0.0))
    other = view(lib(spec("one", "b"), spec("three", "b"), k=2), .7, fb,
                 {**const_scores("abcdefghij", 0.0), "f": 1.0})
    res = merge(EMPTY2, base, other, rng=random.Random(0))
    assert res.alignment.competing == ((2, 2),)
    p = res.provenance(2)
    assert (p.pairing, p.source, p.reason, p.n_shared) == ("competing", "other", "conflict_scores", 1)
    assert res.child.slot(2) == other.library.slot(2)
    # base 1 vs other 1: both changed, tie on shared rows -> base
    assert res.provenance(1).reason == "conflict_scores" and res.child.slot(1) == base.library.slot(1)


def test_competing_skips_the_ancestor_test():
    # Base's slot 2 is unchanged since the ancestor; a matched pair would then go to the other parent,
    # but a competing pair is decided on its shared-row scores (here: base better).
    fa = {1: fs("a", "b", "c", "d"), 2: fs("e", "f")}
    fb = {1: fs("a", "b", "c", "d", "e"), 2: fs("f", "g", "h", "i", "j")}
    anc = lib(None, spec("two", "a"), k=2)
    base = view(lib(spec("one", "a"), spec("two", "a"), k=2), .8, fa, const_scores("abcdefghij", 1.0))
    other = view(lib(spec("one", "b"), spec("three", "b"), k=2), .7, fb, const_scores("abcdefghij", 0.0))
    res = merge(anc, base, other, rng=random.Random(0))
    assert res.provenance(2).source == "base" and res.provenance(2).reason == "conflict_scores"


def test_placed_and_dropped_and_base_only_slots():
    base = view(lib(spec("one", "a"), spec("two", "a"), k=3), .8, {1: fs("a"), 2: fs("b")})
    other = view(lib(spec("one", "b"), spec("three", "b"), spec("four", "b"), k=3), .7,
                 {1: fs("a"), 2: fs("x", "y"), 3: fs("z")})
    res = merge(EMPTY3, base, other, rng=random.Random(0))
    assert res.alignment.placed == ((2, 3),) and res.alignment.dropped == (3,)
    assert res.child.slot(3) == other.library.slot(2)
    assert res.provenance(3).reason == "placed" and res.provenance(3).from_slot == 2
    assert res.provenance(2).reason == "base_unmatched" and res.child.slot(2) == base.library.slot(2)
    assert not any("four" in s.description for s in res.child.slots)
    assert res.child.router == base.library.router and res.router.source == "base"


def test_unit_is_inherited_whole_including_profile_and_inactive_base_slots_stay():
    b_slot = spec("x", "b", profile="deep")
    base = view(lib(spec("x", "a"), k=3), .8, {1: fs("r")}, {"r": 0})
    other = view(lib(None, b_slot, k=3), .7, {2: fs("r")}, {"r": 1})
    res = merge(EMPTY3, base, other, rng=random.Random(0))
    assert res.child.slot(1) == b_slot and res.child.slot(1).profile == "deep"
    assert res.child.slot(2) == base.library.slot(2) and not res.child.slot(2).active
    assert res.provenance(2).reason == "base_layout"


def test_identical_parents_give_the_parent():
    p = lib(spec("x"), spec("y"), k=3)
    fp = {1: fs("a"), 2: fs("b")}
    res = merge(EMPTY3, view(p, .5, fp), view(p, .5, fp), rng=random.Random(0))
    assert res.child == p and res.is_parent_copy(p)
    assert [s.reason for s in res.slots[:2]] == ["identical", "identical"]
    assert classify_child(res.child, p, p) == "identical_to_parent"


def test_hungarian_option_changes_the_child():
    fa = {1: fs("a", "b", "c", "d"), 2: fs("e", "f")}
    fb = {1: fs("a", "b", "c", "d", "e"), 2: fs("f", "g", "h", "i", "j")}
    base = view(lib(spec("one", "a"), spec("two", "a"), k=3), .8, fa, const_scores("abcdefghij", 1.0))
    other = view(lib(spec("one", "b"), spec("three", "b"), k=3), .7, fb, const_scores("abcdefghij", 0.0))
    mb = merge(EMPTY3, base, other, rng=random.Random(0))
    hu = merge(EMPTY3, base, other, rng=random.Random(0), alignment="hungarian")
    assert mb.method == "mutual_best" and hu.method == "hungarian"
    assert mb.child.slot(3) == other.library.slot(2)        # placed into the free slot
    assert hu.child.slot(2) == base.library.slot(2)         # matched with base 2; base wins on scores
    assert not hu.child.slot(3).active


def test_missing_footprint_uses_index_merge():
    base = view(lib(spec("x", "a"), k=2), .8, None)
    other = view(lib(None, spec("y", "b"), k=2), .7, {2: fs("r")})
    res = merge(EMPTY2, base, other, rng=random.Random(0))
    assert res.method == "index" and res.alignment is None and res.jaccard is None
    assert res.fallback_reason == "footprint_missing"
    assert res.child.slot(1) == base.library.slot(1) and res.child.slot(2) == other.library.slot(2)


def test_index_merge_follows_gepa_rules_for_slots_and_router():
    anc = lib(spec("s1"), spec("s2"), spec("s3"), k=4, router="r0")
    a = lib(spec("s1"), spec("s2", "a"), spec("s3", "a"), spec("s4"), k=4, router="r0")
    b = lib(spec("s1", "b"), spec("s2"), spec("s3", "b"), spec("s4"), k=4, router="rb")
    res = index_merge(anc, view(a, .6), view(b, .5), rng=random.Random(0))
    assert [(p.source, p.reason) for p in res.slots] == [
        ("other", "changed_in_other_only"), ("base", "changed_in_base_only"),
        ("base", "aggregate_rule"), ("base", "same_in_both")]
    assert res.child.router == "rb" and res.router.reason == "changed_in_other_only"
    same = index_merge(anc, view(anc, .5), view(anc, .5), rng=random.Random(0))
    assert same.child == anc and {p.source for p in same.slots} == {"ancestor"}
    tie = [index_merge(anc, view(a, .5), view(b, .5), rng=random.Random(s)).provenance(3).source for s in range(20)]
    assert set(tie) == {"base", "other"}


def test_shape_mismatch_rejected():
    with pytest.raises(ValueError):
        merge(Library.empty(3), view(Library.empty(2), .5, {}), view(Library.empty(2), .5, {}), rng=random.Random(0))


def test_result_to_dict_is_json():
    base = view(lib(spec("one", "a"), spec("two", "a"), k=3), .8, {1: fs("a"), 2: fs("b")}, {"a": 1, "b": 1})
    other = view(lib(spec("one", "b"), spec("three", "b"), k=3), .7, {1: fs("a"), 2: fs("x")}, {"a": 0})
    res = merge(EMPTY3, base, other, rng=random.Random(0))
    d = json.loads(json.dumps(res.to_dict()))
    assert d["method"] == "mutual_best" and d["child_hash"] == res.child.content_hash
    assert d["slots"][0]["reason"] == "conflict_scores" and d["alignment"]["placed"] == [[2, 3]]
    idx = index_merge(EMPTY3, base, other, rng=random.Random(0))
    assert json.loads(json.dumps(idx.to_dict()))["alignment"] is None


def test_router_edit_branch_merged_with_program_edit_branch_keeps_both_edits():
    """Issue 15 item 4 (paper A.2): when every imported specialist keeps its index, the router is merged as
    an ordinary component, so the other parent's edited router can win; the child is then not a copy of the
    stronger parent."""
    anc = lib(spec("math"), spec("retrieval"), router="r0")
    program_edit = lib(spec("math", "v2"), spec("retrieval"), router="r0")          # stronger: base
    router_edit = lib(spec("math"), spec("retrieval"), router="r-edited")
    fp = {1: frozenset({"m1", "m2"}), 2: frozenset({"q1"})}
    res = merge(anc, view(program_edit, .8, fp, {}), view(router_edit, .7, fp, {}), rng=random.Random(0))
    assert res.alignment.preserves_indices
    assert res.child.router == "r-edited" and res.router.source == "other"
    assert res.router.reason == "changed_in_other_only"
    assert res.child.slot(1) == program_edit.slot(1)
    assert not res.is_parent_copy(program_edit, router_edit)
    # the same parents with the router-edit branch's specialists re-indexed: the base router stays
    swapped = lib(spec("retrieval"), spec("math"), router="r-edited")
    res = merge(anc, view(program_edit, .8, fp, {}),
                view(swapped, .7, {1: frozenset({"q1"}), 2: frozenset({"m1", "m2"})}, {}), rng=random.Random(0))
    assert not res.alignment.preserves_indices
    assert res.child.router == "r0" and res.router.source == "base"
