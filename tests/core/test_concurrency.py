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
    # k live proposals finish their iteration; up to k stopping (stale) ones finish one minibatch each
    assert res.budget["overshoot"] <= k * (per_iteration + 4)
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


# -- stale proposals: a job whose parent left the Pareto front stops instead of spending budget ---------

def _archive(score_rows):
    import dspy_adaptive.search.archive as A
    from dspy_adaptive.library import Library
    from dspy_adaptive.records import RowResult

    arch = A.Archive(tuple(f"r{i}" for i in range(len(score_rows[0]))))
    for n, scores in enumerate(score_rows):
        results = [RowResult(row_id=f"r{i}", score=s, feedback="", output={}, error=None, selected=None,
                             executed=None, fallback_reason=None, steps=()) for i, s in enumerate(scores)]
        arch.add(Library.empty(2 + n), (), "seed" if n == 0 else "activate", results, 0, n)
    return arch


def test_selectable_is_what_the_selector_could_pick():
    from dspy_adaptive.search.select import CurrentBestSelector, ParetoSelector

    arch = _archive([[0, 1, 0], [1, 1, 0], [0, 0, 1]])     # 0 is dominated by 1; 1 and 2 each win a row
    assert ParetoSelector().selectable(arch) == {1, 2}
    assert CurrentBestSelector().selectable(arch) == {1}
    import random
    picks = {ParetoSelector().select(arch, random.Random(s)) for s in range(50)}
    assert picks <= ParetoSelector().selectable(arch) and picks == {1, 2}


def test_stale_rule_only_fires_when_something_newer_pushed_the_parent_out():
    from dspy_adaptive.search.engine import Job, SearchEngine

    arch = _archive([[0, 1, 0], [1, 1, 0], [0, 0, 1]])
    engine = _fake_engine(arch)
    stale = lambda parent, size: SearchEngine._stale(engine, Job(1, arch[parent], (), "", archive_size=size))
    assert not stale(0, 3)          # nothing archived since the job started (always so at k=1)
    assert stale(0, 1)              # candidate 1, archived meanwhile, dominates parent 0
    assert not stale(1, 2)          # parent 1 is still on the front after candidate 2 arrived


def _fake_engine(arch):
    import threading
    from types import SimpleNamespace

    from dspy_adaptive.search.engine import SearchEngine
    from dspy_adaptive.search.select import ParetoSelector

    engine = SimpleNamespace(_archive_lock=threading.Lock(), archive=arch, selector=ParetoSelector(),
                             _validating=set(), _selectable_memo=(None, -1, set()))
    engine._pushed_out_locked = lambda job: SearchEngine._pushed_out_locked(engine, job)
    engine._selectable_locked = lambda: SearchEngine._selectable_locked(engine)
    return engine


def test_a_doomed_job_frees_its_place_unless_it_already_committed_to_validation():
    from dspy_adaptive.search.engine import Job, SearchEngine

    arch = _archive([[0, 1, 0], [1, 1, 0], [0, 0, 1]])
    engine = _fake_engine(arch)
    pushed_out, on_front = Job(1, arch[0], (), "", archive_size=1), Job(2, arch[1], (), "", archive_size=2)
    assert SearchEngine._doomed(engine, pushed_out) and not SearchEngine._doomed(engine, on_front)
    # a job that passed its last check before candidate 1 arrived validates and is archived: it stays live
    committed = Job(3, arch[0], (), "", archive_size=3)
    assert not SearchEngine._stale(engine, committed, committing=True) and 3 in engine._validating
    engine.archive = _archive([[0, 1, 0], [1, 1, 0], [0, 0, 1], [1, 1, 1]])   # now dominates everyone
    assert not SearchEngine._doomed(engine, Job(3, engine.archive[0], (), "", archive_size=3))
    assert SearchEngine._doomed(engine, Job(4, engine.archive[1], (), "", archive_size=3))


@pytest.mark.parametrize("strategy", ["pareto", "current_best"])
def test_stale_jobs_stop_without_archiving_or_validating(strategy):
    res = run(4, budget=200, candidate_selection_strategy=strategy)
    stale = [p for p in res.proposals if p["kind"] == "stale"]
    for p in stale:
        assert not p["accepted"] and p["child_index"] is None
    archived = [p["child_index"] for p in res.proposals if p["child_index"] is not None]
    assert sorted(archived) == list(range(1, len(res.candidates)))
    assert res.budget["by_kind"]["validation"] == 8 * len(archived)   # no validation was paid for a stale job


@pytest.mark.parametrize("strategy, words", [("pareto", "parent 0 left the Pareto front"),
                                             ("current_best", "parent 0 is no longer the best candidate")])
def test_a_stale_record_says_why_in_the_selectors_terms(strategy, words):
    from types import SimpleNamespace

    from dspy_adaptive.search.engine import Job, JobOutcome, SearchEngine
    from dspy_adaptive.search.select import make_selector

    arch = _archive([[0, 1, 0], [1, 1, 0]])
    engine = SimpleNamespace(selector=make_selector(strategy), _record=lambda **fields: fields)
    out = JobOutcome(Job(3, arch[0], (), "", archive_size=1), (), None, None, None, stopped="before reflection")
    record = SearchEngine._fold(engine, out)
    assert record["kind"] == "stale" and not record["accepted"]
    assert record["reason"] == f"{words} while this proposal was in flight; stopped before reflection"


def test_the_selectable_set_is_computed_once_per_archive_state():
    from dspy_adaptive.search.engine import Job, SearchEngine
    from dspy_adaptive.search.select import ParetoSelector

    class Counting(ParetoSelector):
        calls = 0

        def selectable(self, archive):
            Counting.calls += 1
            return super().selectable(archive)

    arch = _archive([[0, 1, 0], [1, 1, 0], [0, 0, 1]])
    engine = _fake_engine(arch)
    engine.selector = Counting()
    jobs = [Job(i, arch[i % 3], (), "", archive_size=1) for i in range(6)]
    assert [SearchEngine._doomed(engine, j) for j in jobs] == [True, False, False] * 2
    assert Counting.calls == 1                      # six jobs asked, one computation
    engine.archive = _archive([[0, 1, 0], [1, 1, 0], [0, 0, 1], [1, 1, 1]])
    assert SearchEngine._doomed(engine, Job(7, engine.archive[1], (), "", archive_size=3))
    assert Counting.calls == 2                      # the archive changed: recomputed
