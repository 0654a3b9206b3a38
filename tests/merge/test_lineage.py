import random

from dspy_adaptive.merge import LineageNode, eligible_pairs, find_merge_pair, has_desirable_component
from dspy_adaptive.schema import ancestors
from tests.merge.builders import lib, spec

SEED = lib(k=3, router="r0")
N1 = lib(spec("math"), k=3, router="r0")                       # child of 0: activated slot 1
N2 = lib(None, spec("retrieval"), k=3, router="r0")            # child of 0: activated slot 2
N3 = lib(spec("math", "v1"), k=3, router="r0")                 # child of 1
NODES = [LineageNode(0, (), SEED, .40), LineageNode(1, (0,), N1, .50), LineageNode(2, (0,), N2, .55),
         LineageNode(3, (1,), N3, .60)]


def test_ancestors_transitive():
    parents = {n.index: n.parents for n in NODES}
    assert ancestors(parents, 3) == {0, 1} and ancestors(parents, 0) == frozenset()
    assert ancestors([n.parents for n in NODES], 3) == {0, 1}          # a list indexed by candidate works too
    assert ancestors({5: (4,), 4: (9,)}, 5) == {4, 9}                  # unknown parents are not walked further


def test_eligible_pairs_exclude_ancestor_relations():
    pairs = eligible_pairs(NODES)
    assert [(a, b) for a, b, _ in pairs] == [(1, 2), (2, 3)]       # (1, 3): 1 is an ancestor of 3
    assert pairs[0][2] == (0,)


def test_find_pair_orders_base_by_val_mean_and_is_seeded():
    p = find_merge_pair(NODES, random.Random(0), set(), candidates=[1, 2])
    assert (p.base, p.other, p.ancestor) == (2, 1, 0) and p.key == frozenset({1, 2})
    draws = {find_merge_pair(NODES, random.Random(s), set()).key for s in range(20)}
    assert draws == {frozenset({1, 2}), frozenset({2, 3})}
    assert find_merge_pair(NODES, random.Random(5), set()) == find_merge_pair(NODES, random.Random(5), set())


def test_tried_pairs_are_skipped():
    tried = {frozenset({1, 2})}
    assert find_merge_pair(NODES, random.Random(0), tried).key == frozenset({2, 3})
    tried.add(frozenset({2, 3}))
    assert find_merge_pair(NODES, random.Random(0), tried) is None


def test_candidates_restrict_the_pool():
    assert find_merge_pair(NODES, random.Random(0), set(), candidates=[1, 3]) is None
    assert find_merge_pair(NODES, random.Random(0), set(), candidates=[3, 2]).key == frozenset({2, 3})


def test_ancestor_better_than_a_parent_is_ineligible():
    nodes = [LineageNode(0, (), SEED, .52), *NODES[1:]]
    assert [(a, b) for a, b, _ in eligible_pairs(nodes)] == [(2, 3)]


def test_needs_a_component_changed_in_exactly_one_parent():
    # both children changed only slot 1, differently: no component matches the ancestor in one parent.
    a = lib(spec("math", "a"), k=3, router="r0")
    b = lib(spec("math", "b"), k=3, router="r0")
    assert not has_desirable_component(SEED, a, b)
    nodes = [LineageNode(0, (), SEED, .1), LineageNode(1, (0,), a, .2), LineageNode(2, (0,), b, .3)]
    assert find_merge_pair(nodes, random.Random(0), set()) is None
    # identical parents never qualify
    assert not has_desirable_component(SEED, a, a)
    # a router change in one parent qualifies
    assert has_desirable_component(SEED, a, b.with_router("r1").with_slot(1, SEED.slot(1)))


def test_pair_filter_and_zero_means():
    nodes = [LineageNode(0, (), SEED, 0.0), LineageNode(1, (0,), N1, 0.0), LineageNode(2, (0,), N2, 0.0)]
    p = find_merge_pair(nodes, random.Random(0), set())
    assert p.ancestor == 0 and (p.base, p.other) == (1, 2)          # tie -> lower index is base
    assert find_merge_pair(nodes, random.Random(0), set(), pair_filter=lambda a, b: False) is None


def test_ancestor_choice_among_several_is_weighted_by_val_mean():
    # 1 and 2 share ancestors 0 and 4 (a second seed-like root with weight 0 -> never chosen).
    seed2 = lib(k=3, router="r0")
    nodes = [LineageNode(0, (), SEED, .3), LineageNode(1, (0, 4), N1, .5), LineageNode(2, (0, 4), N2, .5),
             LineageNode(4, (), seed2, 0.0)]
    assert {find_merge_pair(nodes, random.Random(s), set()).ancestor for s in range(10)} == {0}
