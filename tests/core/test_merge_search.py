"""Merges inside the search: two branches grow different specialists in the same slot index; the
aligned merge puts them side by side, passes the 5-row gate, and routes both families correctly."""

from __future__ import annotations

import dspy
import pytest

from dspy_adaptive import AdaptiveGEPA, route_of
from tests.core import toy


@pytest.fixture(scope="module")
def merged_run():
    train, val = toy.make_examples3(4), toy.make_examples3(4, offset=100)
    with dspy.context(lm=toy.scripted_lm(toy.router3_respond)):
        opt = AdaptiveGEPA(toy.metric, reflection_lm=toy.branching_reflection_lm(), max_metric_calls=150,
                           reflection_minibatch_size=3, seed=1, use_merge=True, merge_cadence=2,
                           track_stats=True, progress=False)
        routed = opt.compile(dspy.Predict("question -> answer"), trainset=train, valset=val)
        yield routed, routed.detailed_results, val


def test_branches_grew_different_roles_in_the_same_slot(merged_run):
    _, res, _ = merged_run
    reflect_children = [i for i, o in enumerate(res.origins) if o == "activate"]
    descs = {res.libraries[i].slot(1).description for i in reflect_children}
    assert descs == {toy.ARITH_DESCRIPTION, toy.REV_DESCRIPTION}                  # both roles, both in slot 1
    assert all(res.libraries[i].active_ids() == (1,) for i in reflect_children)


def test_aligned_merge_keeps_both_specialists_and_routes_both_families(merged_run):
    routed, res, val = merged_run
    merges = [p for p in res.proposals if p["kind"] == "merge"]
    accepted = [p for p in merges if p["accepted"]]
    assert accepted
    event = accepted[0]
    child = res.libraries[event["child_index"]]
    roles = {child.slot(k).description: k for k in child.active_ids()}
    assert set(roles) == {toy.ARITH_DESCRIPTION, toy.REV_DESCRIPTION}            # no specialist overwritten
    assert event["details"]["classification"] == "pairs_from_both"
    assert len(event["minibatch"]) == 5                                         # the five gate rows ...
    assert set(event["minibatch"]) <= {e.id for e in val}                       # ... are validation rows
    assert event["child_sum"] >= event["parent_sum"]
    assert res.val_aggregate_scores[event["child_index"]] > max(res.val_aggregate_scores[p] for p in event["parents"])
    assert event["details"]["merge"]["alignment"]["placed"]                     # the other role moved slots
    assert res.budget["by_kind"]["merge_check"] == 5 * len(merges)
    assert res.best_idx == event["child_index"]
    pred = routed(question="add: 1 2")
    assert pred.answer == "3" and route_of(pred).executed == roles[toy.ARITH_DESCRIPTION]
    pred = routed(question="reverse: abc")
    assert pred.answer == "cba" and route_of(pred).executed == roles[toy.REV_DESCRIPTION]
