"""The paper's own merge examples: Figure 7 (merge 55 + 59 -> 64) and Table 12 (index merge loses
the retrieval specialist, the aligned merge keeps it)."""

import random

import pytest

from dspy_adaptive.merge import align, classify_child, index_merge, jaccard_matrix, merge
from dspy_adaptive.program.library import Library
from tests.merge.builders import const_scores, lib, rows, spec, view

IF, MATH, RET, PRIV = rows("if", 0, 45), rows("m", 0, 45), rows("r", 0, 45), rows("p", 0, 45)

# Parent #55 (base, 68.4): 1 instruction following, 2 math, 3 retrieval, 4 privacy.
FP55 = {1: IF | rows("p", 0, 3), 2: MATH, 3: RET, 4: rows("p", 3, 45)}
# Parent #59 (68.3): 1 math, 2 privacy, 3 retrieval, 4 instruction following; the rest used the fallback.
FP59 = {1: MATH, 2: rows("p", 0, 36), 3: rows("r", 0, 37), 4: rows("if", 0, 44)}

P55 = lib(spec("instruction", "55"), spec("math", "55"), spec("retrieval", "55"), spec("privacy", "55"),
          router="router of 55")
P59 = lib(spec("math", "59"), spec("privacy", "59"), spec("retrieval", "59"), spec("instruction", "59"),
          router="router of 59")


def test_figure7_jaccard_matrix():
    jm = jaccard_matrix(FP55, FP59)
    expected = [[0.00, 0.04, 0.00, 0.92],
                [1.00, 0.00, 0.00, 0.00],
                [0.00, 0.00, 0.82, 0.00],
                [0.00, 0.73, 0.00, 0.00]]
    for i in range(4):
        for j in range(4):
            assert jm.get(i + 1, j + 1) == pytest.approx(expected[i][j], abs=0.01)


def test_figure7_alignment_pairs_roles_not_indices():
    al = align(FP55, FP59, max_specialists=5, base_active=[1, 2, 3, 4], other_active=[1, 2, 3, 4])
    assert al.matched == ((1, 4), (2, 1), (3, 3), (4, 2))
    assert al.mapping == {4: 1, 1: 2, 3: 3, 2: 4}
    assert not al.placed and not al.competing and not al.dropped


def test_figure7_merge_takes_two_pairs_from_each_parent():
    # Both parents changed every pair since the (empty) ancestor; shared-request scores decide:
    # 55 is better on instruction following and retrieval, 59 on math and privacy.
    s55 = {**const_scores(IF, .9), **const_scores(MATH, .3), **const_scores(RET, .7), **const_scores(PRIV, .8)}
    s59 = {**const_scores(IF, .8), **const_scores(MATH, .4), **const_scores(RET, .6), **const_scores(PRIV, .9)}
    anc = Library.empty(5, router="seed router")
    res = merge(anc, view(P55, .684, FP55, s55), view(P59, .683, FP59, s59), rng=random.Random(0))
    c = res.child
    assert c.slot(1) == P55.slot(1) and c.slot(3) == P55.slot(3)
    assert c.slot(2) == P59.slot(1) and c.slot(4) == P59.slot(2)
    assert c.router == P55.router
    assert [p.reason for p in res.slots[:4]] == ["conflict_scores"] * 4
    assert [p.source for p in res.slots[:4]] == ["base", "other", "base", "other"]
    assert res.provenance(2).from_slot == 1 and res.provenance(2).n_shared == 45
    assert res.provenance(4).n_shared == 33
    assert classify_child(c, P55, P59) == "pairs_from_both"
    # The index merge of the same parents sees four both-changed slots and copies the stronger parent.
    idx = index_merge(anc, view(P55, .684), view(P59, .683), rng=random.Random(0))
    assert idx.child == P55
    assert classify_child(idx.child, P55, P59) == "identical_to_parent"


# Table 12: parent 52 (base, 68.7) and parent 66 (67.2). Their ancestor had math in 1, privacy in 2 and
# retrieval in 3. Branch 52 improved math and privacy in place and added instruction following; branch 66
# moved retrieval into slot 1 (improved: 73.6 vs 62.8) and math into slot 3, kept the ancestor's privacy and
# added its own instruction following. The paper's aligned child keeps 66's retrieval and 52's math,
# privacy and instruction following: projected 73.6 / 35.6 / 86.5 / 89.9, mean 71.4.
ANC = lib(spec("math", "0"), spec("privacy", "0"), spec("retrieval", "0"), router="anc router")
P52 = lib(spec("math", "52"), spec("privacy", "52"), spec("retrieval", "0"), spec("instruction", "52"),
          router="router 52")
P66 = lib(spec("retrieval", "66"), spec("privacy", "0"), spec("math", "66"), spec("instruction", "66"),
          router="router 66")
FP52 = {1: MATH, 2: PRIV, 3: RET, 4: IF}
FP66 = {1: RET, 2: PRIV, 3: MATH, 4: IF}
# measured per-family validation scores of the parents (Table 12), as row scores on each family's rows
FAMILY_SCORES = {"52": {"retrieval": .628, "math": .356, "privacy": .865, "instruction": .899},
                 "66": {"retrieval": .736, "math": .333, "privacy": .883, "instruction": .737}}
ROWS = {"retrieval": RET, "math": MATH, "privacy": PRIV, "instruction": IF}
S52 = {r: v for fam, v in FAMILY_SCORES["52"].items() for r in ROWS[fam]}
S66 = {r: v for fam, v in FAMILY_SCORES["66"].items() for r in ROWS[fam]}


def has_role(library, role):
    return any(s.active and role in s.description for s in library.slots)


def projected(child, parents):
    """The paper's replay projection (Appendix I.2): each family scores what the parent whose specialist
    the child retains measured on it; None when the child has no specialist for some family."""
    out = {}
    for fam in ROWS:
        owners = [name for name, parent in parents.items() for s in child.slots
                  if s.active and fam in s.description and s in parent.slots]
        if not owners:
            return None
        out[fam] = FAMILY_SCORES[owners[0]][fam]
    return out


def test_table12_index_merge_loses_retrieval():
    res = index_merge(ANC, view(P52, .687), view(P66, .672), rng=random.Random(0))
    c = res.child
    assert not has_role(c, "retrieval")
    assert c.slot(1) == P52.slot(1)          # both changed slot 1 -> aggregate rule -> parent 52's math
    assert c.slot(2) == P52.slot(2)          # only 52 changed privacy
    assert c.slot(3) == P66.slot(3)          # 52 kept the ancestor's retrieval, 66 changed -> 66's math
    assert [p.reason for p in res.slots[:4]] == ["aggregate_rule", "changed_in_base_only",
                                                 "changed_in_other_only", "aggregate_rule"]
    assert projected(c, {"52": P52, "66": P66}) is None     # no complete projection without retrieval


def test_table12_aligned_merge_keeps_retrieval_and_reproduces_the_projected_row():
    res = merge(ANC, view(P52, .687, FP52, S52), view(P66, .672, FP66, S66), rng=random.Random(0))
    c = res.child
    assert res.alignment.matched == ((1, 3), (2, 2), (3, 1), (4, 4))
    assert c.slot(3) == P66.slot(1)          # 66's improved retrieval, in the base layout's slot 3
    assert res.provenance(3).reason == "changed_in_other_only"
    assert c.slot(1) == P52.slot(1)          # math: both changed, 52 better on shared rows
    assert res.provenance(1).reason == "conflict_scores"
    assert c.slot(2) == P52.slot(2)          # privacy: only 52 changed it -> 52's (86.5, not 66's 88.3)
    assert res.provenance(2).reason == "changed_in_base_only"
    assert c.slot(4) == P52.slot(4)          # instruction following: 52 better
    assert c.router == P52.router            # specialists were re-indexed: the base router stays
    proj = projected(c, {"52": P52, "66": P66})
    assert {f: round(100 * v, 1) for f, v in proj.items()} == {"retrieval": 73.6, "math": 35.6, "privacy": 86.5,
                                                               "instruction": 89.9}
    assert round(100 * sum(proj.values()) / 4, 1) == 71.4           # the paper's aligned-child mean
    # missing footprints -> the index layout is kept and retrieval is lost again
    fallback = merge(ANC, view(P52, .687, None, S52), view(P66, .672, FP66, S66), rng=random.Random(0))
    assert fallback.method == "index" and fallback.fallback_reason == "footprint_missing"
    assert not has_role(fallback.child, "retrieval")
