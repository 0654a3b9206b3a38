"""The one search loop (issue 26): k = 1 is the sequential case of the window, every LM call of a proposal or a
merge is metered in its own ledger at any k, and the stop rule is `Budget.stop_reason` alone."""

from __future__ import annotations

import dspy
import pytest

from dspy_adaptive import AdaptiveGEPA
from dspy_adaptive.search.budget import Budget
from tests.core import toy


def merging_run(k: int):
    train, val = toy.make_examples3(4), toy.make_examples3(4, offset=100)
    actor, reflection = toy.scripted_lm(toy.router3_respond), toy.branching_reflection_lm()
    with dspy.context(lm=actor):
        opt = AdaptiveGEPA(toy.metric, reflection_lm=reflection, max_metric_calls=150, reflection_minibatch_size=3,
                           seed=1, use_merge=True, merge_cadence=2, track_stats=True, progress=False, num_threads=2,
                           max_concurrent_proposals=k, route_memo=False)
        res = opt.compile(dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
    return res, actor.engine.calls, reflection.engine.calls, val


@pytest.mark.parametrize("k", [1, 2, 4])
def test_every_lm_call_of_a_merging_run_is_metered_in_its_proposal_or_merge(k):
    res, actor_calls, reflection_calls, val = merging_run(k)
    merges = [p for p in res.proposals if p["kind"] == "merge" and p["minibatch"]]
    assert merges, "the toy world merges its two branches"
    for merge in merges:               # a merge check runs router and fallback calls: metered under their roles
        assert merge["usage"].get("router", {}).get("calls", 0) >= 1
        assert merge["usage"].get("fallback", {}).get("calls", 0) >= 1
        assert "reflection" not in merge["usage"]        # a merge makes no reflection call
    metered = {}
    for p in res.proposals:
        for role, v in p["usage"].items():
            metered[role] = metered.get(role, 0) + v["calls"]
    # the seed validation (an empty library: no router call) makes one fallback call per row; every other LM
    # call is in exactly one proposal's or merge's ledger
    assert metered.get("reflection", 0) == len(reflection_calls)
    assert sum(v for r, v in metered.items() if r != "reflection") + len(val) == len(actor_calls)
    assert res.run.usage["router"]["calls"] + res.run.usage["fallback"]["calls"] == len(actor_calls)


def test_the_loop_stops_only_where_the_budget_says():
    """The engine has no stop rule of its own: the run's stop reason is the budget's, and a run stops as soon as
    the budget would refuse another iteration (at most one iteration of overshoot)."""
    res, *_ = merging_run(1)
    assert res.run.stop_reason == "budget exhausted"
    last = res.proposals[-1]
    before_last = res.proposals[-2]["budget_at"]
    b = Budget(150)
    b.charge("validation", before_last)
    assert b.stop_reason() is None                       # the last iteration was allowed to start ...
    b.charge("validation", last["budget_at"] - before_last)
    assert b.stop_reason() == "budget exhausted"         # ... and after it none could


def test_the_idle_rule_is_the_budgets():
    b = Budget(100, max_idle_iterations=2)
    b.iteration_finished(10, 10)
    assert b.stop_reason() is None
    b.iteration_finished(10, 10)
    assert b.stop_reason().startswith("stalled: 2 iterations in a row")
    b.iteration_finished(10, 14)
    assert b.stop_reason() is None
    assert b.stop_reason(spent=100) == "budget exhausted"        # judged by the folded count when given
