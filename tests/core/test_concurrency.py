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
    assert [c.content_hash for c in a.libraries] == [c.content_hash for c in b.libraries]
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
    assert [res.libraries[p["child_index"]].content_hash for p in accepted] == hashes


# -- stale proposals: a job whose parent left the Pareto front stops instead of spending budget ---------

def _archive(score_rows):
    import dspy_adaptive.search.archive as A
    from dspy_adaptive.program.library import Library
    from dspy_adaptive.schema import RowResult

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


def _job(iteration, parent, archive_size):
    from dspy_adaptive.search.inflight import Job

    return Job(iteration, parent, (), (), archive_size=archive_size)


def test_stale_rule_only_fires_when_something_newer_pushed_the_parent_out():
    from dspy_adaptive.search.inflight import InFlight
    from dspy_adaptive.search.select import ParetoSelector

    arch = _archive([[0, 1, 0], [1, 1, 0], [0, 0, 1]])
    in_flight = InFlight(ParetoSelector(), 2, arch)
    assert not in_flight.stale(_job(1, arch[0], 3))   # nothing archived since the job started (always so at k=1)
    assert in_flight.stale(_job(1, arch[0], 1))       # candidate 1, archived meanwhile, dominates parent 0
    assert not in_flight.stale(_job(1, arch[1], 2))   # parent 1 is still on the front after candidate 2 arrived


def test_a_doomed_job_frees_its_place_unless_it_already_committed_to_validation():
    from dspy_adaptive.search.inflight import InFlight
    from dspy_adaptive.search.select import ParetoSelector

    arch = _archive([[0, 1, 0], [1, 1, 0], [0, 0, 1]])
    in_flight = InFlight(ParetoSelector(), 2, arch)
    pushed_out, on_front = _job(1, arch[0], 1), _job(2, arch[1], 2)
    assert in_flight.doomed(pushed_out) and not in_flight.doomed(on_front)
    # a job that passed its last check before candidate 3 arrived validates and is archived: it stays live
    committed = _job(3, arch[0], 3)
    assert not in_flight.stale(committed, committing=True)
    grown = _archive([[0, 1, 0], [1, 1, 0], [0, 0, 1], [1, 1, 1]])   # candidate 3 dominates everyone
    in_flight.archive_changed(grown)
    assert not in_flight.doomed(committed) and in_flight.stale(committed)
    assert in_flight.doomed(_job(4, grown[1], 3))


def test_room_for_k_live_jobs_and_k_stopping_ones():
    from concurrent.futures import Future

    from dspy_adaptive.search.inflight import InFlight
    from dspy_adaptive.search.select import ParetoSelector

    arch = _archive([[0, 1, 0], [1, 1, 0], [0, 0, 1]])
    in_flight = InFlight(ParetoSelector(), 2, arch)
    assert in_flight.has_room() and len(in_flight) == 0
    live = [Future(), Future()]
    for i, f in enumerate(live):
        in_flight.add(f, _job(i, arch[1], 3))
    assert not in_flight.has_room()                  # k = 2 live jobs
    in_flight.add(Future(), _job(2, arch[0], 1))     # doomed: parent 0 was pushed out since it started
    in_flight.add(Future(), _job(3, arch[0], 1))
    assert len(in_flight) == 4 and not in_flight.has_room()   # 2k jobs in all
    live[1].set_result("done")
    live[0].set_result("done")
    assert in_flight.wait() == live                  # finished jobs come back in iteration order
    assert len(in_flight) == 2 and in_flight.has_room()


@pytest.mark.parametrize("strategy, words", [("pareto", "parent 0 left the Pareto front"),
                                             ("current_best", "parent 0 is no longer the best candidate")])
def test_a_stale_record_says_why_in_the_selectors_terms(strategy, words):
    from dspy_adaptive.search.inflight import InFlight
    from dspy_adaptive.search.select import make_selector

    arch = _archive([[0, 1, 0], [1, 1, 0]])
    reason = InFlight(make_selector(strategy), 2, arch).stale_reason(_job(3, arch[0], 1), "before reflection")
    assert reason == f"{words} while this proposal was in flight; stopped before reflection"


def test_the_selectable_set_is_computed_once_per_archive_state():
    from dspy_adaptive.search.inflight import InFlight
    from dspy_adaptive.search.select import ParetoSelector

    class Counting(ParetoSelector):
        calls = 0

        def selectable(self, archive):
            Counting.calls += 1
            return super().selectable(archive)

    arch = _archive([[0, 1, 0], [1, 1, 0], [0, 0, 1]])
    in_flight = InFlight(Counting(), 2, arch)
    jobs = [_job(i, arch[i % 3], 1) for i in range(6)]
    assert [in_flight.doomed(j) for j in jobs] == [True, False, False] * 2
    assert [in_flight.stale(j) for j in jobs] == [True, False, False] * 2
    assert Counting.calls == 1                      # twelve questions, one computation
    grown = _archive([[0, 1, 0], [1, 1, 0], [0, 0, 1], [1, 1, 1]])
    in_flight.archive_changed(grown)
    assert in_flight.doomed(_job(7, grown[1], 3))
    assert Counting.calls == 2                      # the archive changed: recomputed


@pytest.mark.parametrize("strategy", ["pareto", "current_best"])
def test_stale_jobs_stop_without_archiving_or_validating(strategy):
    res = run(4, budget=200, candidate_selection_strategy=strategy)
    stale = [p for p in res.proposals if p["kind"] == "stale"]
    for p in stale:
        assert not p["accepted"] and p["child_index"] is None and p["failure"] == "stale"
        assert " while this proposal was in flight; stopped before " in p["reason"]
    archived = [p["child_index"] for p in res.proposals if p["child_index"] is not None]
    assert sorted(archived) == list(range(1, len(res.candidates)))
    assert res.budget["by_kind"]["validation"] == 8 * len(archived)   # no validation was paid for a stale job


# -- reproducibility at any k (issue 15 item 11) ------------------------------------------------------------

def _jittered_run(k, seed_jitter, fold_order="start", budget=200):
    """A run whose LM answers depend only on the prompt but whose calls take a random time, so threads
    finish in a different order every run."""
    import random
    import time

    from dspy_adaptive.testing import scripted_lm

    jitter = random.Random(seed_jitter)

    def respond(call):
        time.sleep(jitter.uniform(0, 0.004))
        return toy.actor_respond(call)

    train, val = toy.make_examples(4), toy.make_examples(4, offset=100)
    with dspy.context(lm=scripted_lm(respond, model="scripted/jittery")):
        opt = AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(vary=True), max_metric_calls=budget,
                           reflection_minibatch_size=4, seed=5, use_merge=True, track_stats=True, progress=False,
                           num_threads=4, max_concurrent_proposals=k, fold_order=fold_order,
                           candidate_selection_strategy="pareto")
        return opt.compile(dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results


def _signature(res):
    return ([lib.content_hash for lib in res.libraries], res.val_subscores, res.discovery_eval_counts, res.budget,
            [(p["iteration"], p["kind"], p["action"], p["parents"], p["minibatch"], p["accepted"], p["failure"],
              p["budget_at"], p["child_hash"]) for p in res.proposals])


@pytest.mark.parametrize("k", [2, 4])
def test_a_seeded_run_is_reproducible_at_any_k(k):
    runs = [_signature(_jittered_run(k, seed_jitter=j)) for j in range(3)]
    assert runs[0] == runs[1] == runs[2]
    assert runs[0][3]["spent"] >= runs[0][3]["max"] and len(runs[0][4]) >= 4


def test_the_run_record_says_whether_the_seed_fixes_the_run():
    assert run(2).reproducibility.startswith("fixed by the seed (k=2")
    assert run(2, fold_order="completion").reproducibility.startswith("not fixed by the seed")
    assert run(1).reproducibility == "fixed by the seed (k=1)"


def test_in_start_order_a_beaten_parent_stops_its_proposal_before_its_child_minibatch():
    """Issue 31: a proposal whose parent a concurrent one beat while it ran stops before its child minibatch (its
    reflection overlapped the proposals started before it: only steps that spend scored calls wait), not before
    its validation: it waits for the proposals started before its predecessor, then judges its parent on the
    archive they left -- a seed-fixed point."""
    from benchmarks.perf import Task, examples, metric
    from dspy_adaptive.testing import scripted_lm

    task = Task("climb")

    def once():
        with dspy.context(lm=scripted_lm(task.actor, model="scripted/actor")):
            return AdaptiveGEPA(metric, reflection_lm=scripted_lm(task.adaptive_reflection), max_metric_calls=200,
                                num_threads=4, seed=2, track_stats=True, progress=False, use_merge=False,
                                max_concurrent_proposals=4).compile(
                dspy.Predict("question -> answer"), trainset=examples(16, 0),
                valset=examples(16, 10_000)).detailed_results

    res = once()
    stale = [p for p in res.proposals if p["kind"] == "stale"]
    assert stale, "the climb pushes parents out while proposals run"
    assert not [p for p in stale if p["reason"].endswith("before reflection")]     # reflection never waits
    early = [p for p in stale if p["reason"].endswith("stopped before its child minibatch")]
    assert early and all(p["child_sum"] is None and p["action"] for p in early)   # reflected, no gate
    order = [p["budget_at"] for p in res.proposals]
    for p in early:                                  # it cost its parent minibatch and nothing more
        i = res.proposals.index(p)
        assert i == 0 or order[i] - order[i - 1] == len(p["minibatch"])
    assert _signature(once()) == _signature(res)     # and the run is the same run again


def test_a_child_minibatch_overlaps_its_predecessor_but_a_validation_waits_for_it():
    """Start order: before its child minibatch a proposal waits only for the proposals started before its
    predecessor (and judges on the archive they left); before its validation it waits for its predecessor too."""
    import threading
    import time

    from dspy_adaptive.search.select import ParetoSelector
    from dspy_adaptive.search.window import Window

    arch = _archive([[0, 1, 0]])
    window = Window(3, "start", ParetoSelector(), arch, folded_spent=0)
    release, child_checked, seen = threading.Event(), threading.Event(), {}

    def predecessor(job, w):                     # still running: not settled until released
        release.wait(5)

    def proposal(job, w):
        seen["child"] = w.stop_reason(job, "before its child minibatch")
        child_checked.set()
        seen["validation"] = w.stop_reason(job, "before validation", committing=True)

    window.submit(predecessor, _job(1, arch[0], 1))
    window.submit(proposal, _job(2, arch[0], 1))
    assert child_checked.wait(5) and seen["child"] is None      # went on while the predecessor still runs
    time.sleep(0.2)
    assert "validation" not in seen                             # but waits for it to validate
    release.set()
    window.close(interrupted=False)
    assert seen["validation"] is None


def test_archived_since_counts_only_what_the_judged_iterations_added_after_a_size():
    """A candidate the archive already held when a proposal started is never news to it, whatever its iteration
    (a merge folded just before the proposal started carries the iteration before the proposal's)."""
    arch = _archive([[0, 1, 0], [1, 1, 0], [0, 0, 1]])            # iterations 0, 1, 2
    assert arch.archived_since(3, 9) == 0
    assert arch.archived_since(2, 2) == 0 and arch.archived_since(2, 3) == 1
    assert arch.archived_since(1, 2) == 1 and arch.archived_since(1, 3) == 2
