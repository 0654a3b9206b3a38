import pytest

from dspy_adaptive.merge import align
from tests.merge.builders import rows


def fs(*ids):
    return frozenset(ids)


def test_identity_alignment():
    fa = {1: fs("a", "b"), 2: fs("c")}
    al = align(fa, dict(fa), max_specialists=3, base_active=[1, 2], other_active=[1, 2])
    assert al.matched == ((1, 1), (2, 2)) and not al.placed and not al.competing and not al.dropped
    assert al.mapping == {1: 1, 2: 2} and al.preserves_indices


def test_base_side_tie_goes_to_lower_index():
    # other slot 1 overlaps base 1 and base 2 equally (0.5): it prefers base 1.
    fa = {1: fs("a", "b"), 2: fs("c", "d")}
    fb = {1: fs("a", "b", "c", "d")}
    al = align(fa, fb, max_specialists=3, base_active=[1, 2], other_active=[1])
    assert al.matched == ((1, 1),)


def test_other_side_tie_goes_to_lower_index_and_rest_is_placed():
    fa = {1: fs("a", "b", "c", "d")}
    fb = {1: fs("a", "b"), 2: fs("c", "d")}
    al = align(fa, fb, max_specialists=3, base_active=[1], other_active=[1, 2])
    assert al.matched == ((1, 1),)
    assert al.placed == ((2, 2),)            # own index 2 is free in the base layout


def test_unmatched_use_own_index_then_lowest_free_largest_first():
    # base uses slots 1 and 3; other's unmatched 3 and 4 (no overlap): 4 has the larger footprint,
    # goes first, its own index 4 is free; 3 is occupied in the base -> lowest free slot = 2.
    fa = {1: fs("a"), 3: fs("b")}
    fb = {3: fs("x"), 4: fs("y", "z")}
    al = align(fa, fb, max_specialists=5, base_active=[1, 3], other_active=[3, 4])
    assert al.matched == ()
    assert al.placed == ((4, 4), (3, 2))
    assert al.mapping == {3: 2, 4: 4}


def test_footprint_size_ties_go_lower_index_first():
    fa = {1: fs("a"), 2: fs("b")}
    fb = {1: fs("x"), 2: fs("y")}
    al = align(fa, fb, max_specialists=3, base_active=[1, 2], other_active=[1, 2])
    assert al.placed == ((1, 3),)            # slot 1 processed first and takes the only free slot
    assert al.dropped == (2,)                # no free slot, no positive overlap


def _capacity_case():
    fa = {1: fs("a", "b", "c", "d"), 2: fs("e", "f")}
    fb = {1: fs("a", "b", "c", "d", "e"), 2: fs("f", "g", "h", "i", "j")}
    return fa, fb


def test_capacity_fallback_competes_with_strongest_unmatched_base():
    fa, fb = _capacity_case()
    # J(b1,o1)=.8, J(b2,o1)=J(b2,o2)=1/6: base 2 prefers o1 (tie -> lower), o1 prefers base 1,
    # so only (1,1) is mutual; o2 has no free slot (K=2) and competes with unmatched base 2.
    al = align(fa, fb, max_specialists=2, base_active=[1, 2], other_active=[1, 2])
    assert al.matched == ((1, 1),)
    assert al.competing == ((2, 2),)
    assert al.mapping == {1: 1, 2: 2} and not al.dropped


def test_hungarian_matches_what_mutual_best_leaves_unmatched():
    fa, fb = _capacity_case()
    mb = align(fa, fb, max_specialists=3, base_active=[1, 2], other_active=[1, 2])
    hu = align(fa, fb, max_specialists=3, base_active=[1, 2], other_active=[1, 2], method="hungarian")
    assert mb.matched == ((1, 1),) and mb.placed == ((2, 3),)
    assert hu.matched == ((1, 1), (2, 2)) and hu.placed == ()


def test_hungarian_never_pairs_zero_overlap():
    fa = {1: fs("a"), 2: fs("b")}
    fb = {1: fs("a"), 2: fs("z")}
    hu = align(fa, fb, max_specialists=3, base_active=[1, 2], other_active=[1, 2], method="hungarian")
    assert hu.matched == ((1, 1),) and hu.placed == ((2, 3),)


def test_drop_when_no_capacity_and_no_positive_overlap():
    fa = {1: fs("a"), 2: fs("b")}
    fb = {1: fs("a"), 2: fs("q")}
    al = align(fa, fb, max_specialists=2, base_active=[1, 2], other_active=[1, 2])
    assert al.matched == ((1, 1),) and al.dropped == (2,) and al.mapping == {1: 1}
    assert not al.preserves_indices


def test_competing_only_with_unmatched_base():
    # o2 overlaps matched base 1 strongly and nothing else -> dropped, not competing with base 1.
    fa = {1: fs("a", "b", "c"), 2: fs("z")}
    fb = {1: fs("a", "b"), 2: fs("c")}
    al = align(fa, fb, max_specialists=2, base_active=[1, 2], other_active=[1, 2])
    assert al.matched == ((1, 1),) and al.competing == () and al.dropped == (2,)


def test_inactive_and_missing_entries():
    fa = {1: rows("r", 0, 5), 4: rows("x", 0, 3)}      # 4 is not active -> ignored
    fb = {}                                             # other's active slot 2 has no entry -> empty
    al = align(fa, fb, max_specialists=3, base_active=[1], other_active=[2])
    assert al.placed == ((2, 2),)


def test_bad_method_and_slot():
    with pytest.raises(ValueError):
        align({}, {}, max_specialists=2, base_active=[], other_active=[], method="greedy")
    with pytest.raises(ValueError):
        align({}, {}, max_specialists=2, base_active=[3], other_active=[])


def test_to_dict_is_json():
    import json
    fa, fb = _capacity_case()
    al = align(fa, fb, max_specialists=2, base_active=[1, 2], other_active=[1, 2])
    assert json.loads(json.dumps(al.to_dict()))["competing"] == [[2, 2]]
