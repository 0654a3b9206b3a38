"""Concurrent proposals (max_concurrent_proposals=k): honest budget, nothing lost or duplicated."""

from __future__ import annotations

import dspy
import pytest

from dspy_adaptive import AdaptiveGEPA
from tests.core import toy


def run(k, budget=120, reflection=None, **kw):
    train, val = toy.make_examples(4), toy.make_examples(4, offset=100)
    with dspy.context(lm=toy.actor_lm(latency=0.002)):
        opt = AdaptiveGEPA(toy.metric, reflection_lm=reflection or toy.reflection_lm(vary=True),
                           max_metric_calls=budget, reflection_minibatch_size=4, seed=5, use_merge=False,
                           track_stats=True, progress=False, num_threads=4, max_concurrent_proposals=k, **kw)
        return opt.compile(dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results


def test_k1_is_the_sequential_loop():
    a = run(1)
    train, val = toy.make_examples(4), toy.make_examples(4, offset=100)
    with dspy.context(lm=toy.actor_lm()):
        b = AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(vary=True), max_metric_calls=120,
                         reflection_minibatch_size=4, seed=5, use_merge=False, track_stats=True, progress=False,
                         num_threads=1).compile(dspy.Predict("question -> answer"), trainset=train,
                                                valset=val).detailed_results
    assert [c.content_hash for c in a.candidates] == [c.content_hash for c in b.candidates]
    assert a.val_subscores == b.val_subscores and a.budget == b.budget
    assert [(p["action"], p["minibatch"], p["accepted"]) for p in a.proposals] == \
           [(p["action"], p["minibatch"], p["accepted"]) for p in b.proposals]


@pytest.mark.parametrize("k", [2, 4])
def test_k_proposals_keep_the_budget_rule_and_lose_nothing(k):
    res = run(k, reflection=toy.reflection_lm(program_source=toy.WRONG_SOURCE, vary=True))
    per_iteration = 2 * 4 + 8            # parent + child minibatch + one validation pass
    assert res.budget["spent"] >= res.budget["max"]
    assert res.budget["overshoot"] <= k * per_iteration
    assert sum(res.budget["by_kind"].values()) == res.budget["spent"]
    iterations = [p["iteration"] for p in res.proposals]
    assert len(iterations) == len(set(iterations))                 # every proposal folded exactly once
    archived = [p["child_index"] for p in res.proposals if p["child_index"] is not None]
    assert sorted(archived) == list(range(1, len(res.candidates)))  # every archived child has its proposal


def test_concurrent_accepted_children_are_all_archived():
    res = run(4)
    accepted = [p for p in res.proposals if p["accepted"]]
    assert accepted and len(res.candidates) == 1 + len(accepted)
    assert max(res.val_aggregate_scores) == pytest.approx(1.0)
    hashes = [p["child_hash"] for p in accepted]
    assert [res.candidates[p["child_index"]].content_hash for p in accepted] == hashes
