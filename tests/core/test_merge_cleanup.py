"""The merge step on a hand-built archive: alignment re-slots a colliding role, the 5-row gate, and the
post-merge cleanup (unselected specialists deactivated, program text kept, archived scores pre-cleanup).
The proposer only proposes: the engine validates, archives and records."""

from __future__ import annotations

import dspy

from dspy_adaptive import Library, RoutedProgram, Slot
from dspy_adaptive.data import make_rows
from dspy_adaptive.lm.usage import UsageMeter
from dspy_adaptive.merge.proposer import MergeProposer, MergeState
from dspy_adaptive.merge.settings import MergeSettings
from dspy_adaptive.reflection.propose import Reflector
from dspy_adaptive.search.budget import Budget
from dspy_adaptive.search.engine import RunServices, SearchEngine
from dspy_adaptive.search.evaluate import Evaluator
from dspy_adaptive.search.progress import SearchProgress
from dspy_adaptive.search.sampling import uniform_sampler
from dspy_adaptive.search.schedule import Schedule
from dspy_adaptive.search.settings import SearchSettings
from tests.core import toy


def _engine(base, lm, val, merge: MergeSettings) -> tuple[SearchEngine, Evaluator, Budget]:
    """A search engine over `val` (as both sets) with `merge`, no store, no progress bar."""
    budget = Budget(10_000)
    evaluator = Evaluator(base, toy.metric, budget)
    services = RunServices(evaluator, budget, UsageMeter(), None, Schedule(), SearchProgress(False))
    engine = SearchEngine(settings=SearchSettings(), merge=merge, seed_library=Library.empty(3), train=val, val=val,
                          services=services, sampler=uniform_sampler,
                          reflector=Reflector(lm, input_names=("question",), output_names=("answer",)))
    return engine, evaluator, budget

USELESS = "Poetry: requests for poems."   # the scripted router never picks this one


def test_merge_reslots_cleans_up_and_keeps_measured_scores():
    lm = toy.scripted_lm(toy.router3_respond)
    val = make_rows(toy.make_examples3(3, offset=100), "valset")
    base = RoutedProgram(dspy.Predict("question -> answer"), Library.empty(3), fast_lm=lm, deep_lm=lm)
    engine, evaluator, budget = _engine(base, lm, val, MergeSettings())
    seed = Library.empty(3)
    a = (seed.with_slot(1, Slot().activated(toy.ARITH_DESCRIPTION, toy.ADD_SOURCE, "fast"))
             .with_slot(3, Slot().activated(USELESS, toy.WRONG_SOURCE, "deep")))
    b = seed.with_slot(1, Slot().activated(toy.REV_DESCRIPTION, toy.REV_SOURCE, "fast"))
    with dspy.context(lm=lm):
        for lib, parents in ((seed, ()), (a, (0,)), (b, (0,))):
            engine.add_to_archive(lib, parents, "test", evaluator.evaluate(lib, val, "validation"), 0)
        spent = budget.spent
        record = engine.merge_step()
    assert record is not None and record.kind == "merge" and record.accepted and record.failure is None
    assert engine.merge_state == MergeState(invocations=1, accepted_since=0, tried=((1, 2),), accepted=1)
    assert budget.report().by_kind["merge_check"] == 5 and len(record.minibatch) == 5
    child = engine.archive[record.child_index]
    roles = {child.library.slot(k).description: k for k in child.library.active_ids()}
    assert set(roles) == {toy.ARITH_DESCRIPTION, toy.REV_DESCRIPTION}   # both roles survive the slot clash
    assert roles[toy.REV_DESCRIPTION] == 2                                # placed in the lowest free slot
    # cleanup: the never-selected specialist is deactivated, its program text kept
    assert record.details["cleanup_deactivated"] == [3]
    assert not child.library.slot(3).active and child.library.slot(3).program_source == toy.WRONG_SOURCE
    # archived scores are the ones measured before cleanup (under the pre-cleanup library's hash)
    measured_hash = record.details["measured_hash"]
    measured = {rid: res.score for (h, rid), res in evaluator.cache.items() if h == measured_hash}
    assert child.scores == measured and len(measured) == len(val)
    assert child.library.content_hash == record.child_hash != measured_hash
    # the paper's accounting (Appendix L): 5 merge-check scores, then a full validation that re-runs and
    # charges every row, the 5 gate rows included (with reuse_scores=True they would not be re-charged)
    assert budget.spent == spent + 5 + len(val)


def test_the_proposer_proposes_and_never_touches_the_archive():
    import random

    from dspy_adaptive.search.archive import Archive

    lm = toy.scripted_lm(toy.router3_respond)
    val = make_rows(toy.make_examples3(3, offset=100), "valset")
    base = RoutedProgram(dspy.Predict("question -> answer"), Library.empty(3), fast_lm=lm, deep_lm=lm)
    budget = Budget(10_000)
    evaluator = Evaluator(base, toy.metric, budget)
    seed = Library.empty(3)
    a = seed.with_slot(1, Slot().activated(toy.ARITH_DESCRIPTION, toy.ADD_SOURCE, "fast"))
    b = seed.with_slot(1, Slot().activated(toy.REV_DESCRIPTION, toy.REV_SOURCE, "fast"))
    archive = Archive(tuple(r.id for r in val))
    with dspy.context(lm=lm):
        for lib, parents in ((seed, ()), (a, (0,)), (b, (0,))):
            archive.add(lib, parents, "test", evaluator.evaluate(lib, val, "validation"), budget.spent, 0)
        by_id = {r.id: r for r in val}
        checked = []

        def check(library, row_ids):
            checked.append(list(row_ids))
            return evaluator.evaluate(library, [by_id[i] for i in row_ids], "merge_check")

        proposal = MergeProposer().propose(archive, MergeState(), random.Random(0), check)
        assert proposal is not None and proposal.parents == (1, 2) and proposal.passed
        assert checked == [list(proposal.gate_rows)] and len(archive) == 3        # nothing archived
        assert proposal.child_sum >= max(proposal.parent_sums)
        # a pair already tried is not proposed again
        assert MergeProposer().propose(archive, MergeState().started((2, 1)), random.Random(0), check) is None


def _copy_engine(parent_copies: str, monkeypatch):
    """Seed, a (arith specialist) and b (arith + reversal): their aligned merge rebuilds b exactly. (GEPA's
    dominator filter would drop a, whose only win, the 'revel' row b misroutes, it shares with the seed;
    the pair is made a merge candidate here so the test is about what a copy costs.)"""
    import dspy_adaptive.merge.proposer as proposer_module
    monkeypatch.setattr(proposer_module, "find_dominator_programs", lambda fronts, scores: list(range(len(scores))))
    lm = toy.scripted_lm(toy.router3_respond)
    val = make_rows(toy.make_examples3(3, offset=100), "valset")
    base = RoutedProgram(dspy.Predict("question -> answer"), Library.empty(3), fast_lm=lm, deep_lm=lm)
    engine, evaluator, budget = _engine(base, lm, val, MergeSettings(parent_copies=parent_copies))
    seed = Library.empty(3)
    a = seed.with_slot(1, Slot().activated(toy.ARITH_DESCRIPTION, toy.ADD_SOURCE, "fast"))
    b = a.with_slot(2, Slot().activated(toy.REV_DESCRIPTION, toy.REV_SOURCE, "fast"))
    with dspy.context(lm=lm):
        for lib, parents in ((seed, ()), (a, (0,)), (b, (0,))):
            engine.add_to_archive(lib, parents, "test", evaluator.evaluate(lib, val, "validation"), 0)
    return engine, lm, budget, b, len(val)


def test_a_merge_that_copies_a_parent_is_measured_and_charged_by_default(monkeypatch):
    """Issue 15 item 10: with the paper's accounting a copy is re-measured and charged, and when it passes
    it is archived (as the paper's 13 identical children were) and classified identical_to_parent."""
    engine, lm, budget, b, n_val = _copy_engine("measure", monkeypatch)
    spent = budget.spent
    with dspy.context(lm=lm):
        record = engine.merge_step()
    assert record.details["parent_copy"] == 2 and record.child_hash == b.content_hash
    assert record.accepted and record.details["classification"] == "identical_to_parent"
    assert budget.spent == spent + 5 + n_val                     # 5 check scores + a full validation
    assert engine.merge_state.invocations == 1 and engine.merge_state.accepted == 1


def test_a_merge_that_copies_a_parent_can_be_skipped_before_its_check(monkeypatch):
    engine, lm, budget, b, _ = _copy_engine("skip", monkeypatch)
    spent = budget.spent
    with dspy.context(lm=lm):
        record = engine.merge_step()
    assert record.kind == "merge" and not record.accepted and record.failure == "merge_copy"
    assert record.details["parent_copy"] == 2 and record.minibatch == ()
    assert budget.spent == spent                                  # nothing scored
    assert engine.merge_state.invocations == 0 and engine.merge_state.copies_skipped == 1
    assert engine.merge_state.tried == ((1, 2),)
