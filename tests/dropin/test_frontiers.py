"""gepa_kwargs={"frontier_type": ...}: gepa's four Pareto frontiers drive parent selection for a metric that returns
objective_scores, computed as gepa computes them."""

from __future__ import annotations

import random

import dspy
import pytest
from gepa.core.state import GEPAState, ValsetEvaluation
from gepa.gepa_utils import select_program_candidate_from_pareto_front

from dspy_adaptive.data import InputError
from dspy_adaptive.program.library import Library
from dspy_adaptive.schema import RowResult
from dspy_adaptive.search.archive import Archive
from dspy_adaptive.search.frontier import FRONTIER_TYPES, MissingObjectivesError, frontier
from dspy_adaptive.search.select import ParetoSelector
from tests.core import toy
from tests.dropin.common import data, optimizer

ROWS = ("r0", "r1", "r2")
#: three candidates: per-row scores and per-row objective scores (r2 of candidate 2 reports no "cost")
SCORES = [{"r0": 1.0, "r1": 0.0, "r2": 0.5}, {"r0": 0.0, "r1": 1.0, "r2": 0.5}, {"r0": 0.5, "r1": 0.5, "r2": 1.0}]
OBJECTIVES = [
    {"r0": {"quality": 1.0, "cost": 0.2}, "r1": {"quality": 0.0, "cost": 0.9}, "r2": {"quality": 0.5, "cost": 0.9}},
    {"r0": {"quality": 0.0, "cost": 0.9}, "r1": {"quality": 1.0, "cost": 0.9}, "r2": {"quality": 0.5, "cost": 0.9}},
    {"r0": {"quality": 0.6, "cost": 0.1}, "r1": {"quality": 0.6, "cost": 0.1}, "r2": {"quality": 0.9}},
]


def gepa_state(frontier_type: str) -> GEPAState:
    """gepa's own state over the same three candidates, added as gepa's engine adds them."""
    def evaluation(i):
        return ValsetEvaluation(dict.fromkeys(ROWS), dict(SCORES[i]), {r: dict(o) for r, o in OBJECTIVES[i].items()})
    state = GEPAState({"p": "seed"}, evaluation(0), frontier_type=frontier_type)
    for i in (1, 2):
        state.update_state_with_new_program([0], {"p": f"c{i}"}, evaluation(i), None, 0)
    return state


@pytest.mark.parametrize("frontier_type", FRONTIER_TYPES)
def test_each_frontier_is_the_one_gepa_keeps(frontier_type):
    ours = frontier(frontier_type, SCORES, OBJECTIVES, ROWS)
    assert ours == gepa_state(frontier_type).get_pareto_front_mapping()


def archive_of(frontier_type: str) -> Archive:
    arch = Archive(ROWS, frontier_type=frontier_type)
    for i in range(3):
        results = [RowResult(row_id=r, score=SCORES[i][r], feedback="", output={}, selected=0, executed=0,
                             fallback_reason=None, error=None, steps=(), objective_scores=OBJECTIVES[i][r])
                   for r in ROWS]
        arch.add(Library.empty(2).with_router(f"router {i}"), (0,) if i else (), "seed" if i == 0 else "x",
                 results, 0, i)
    return arch


@pytest.mark.parametrize("frontier_type", FRONTIER_TYPES)
def test_pareto_selection_samples_the_frontier_of_the_run(frontier_type):
    arch = archive_of(frontier_type)
    state = gepa_state(frontier_type)
    means = [sum(s.values()) / 3 for s in SCORES]
    ours = [ParetoSelector().select(arch, random.Random(seed)) for seed in range(40)]
    gepas = [select_program_candidate_from_pareto_front(state.get_pareto_front_mapping(), means, random.Random(seed))
             for seed in range(40)]
    assert ours == gepas                                   # the same draws as gepa's selector, seed for seed
    if frontier_type == "objective":   # (candidate 0 is on the per-row frontier: best on r0)
        assert set(ours) == {1, 2}        # 2: best mean quality (0.7); 1: best mean cost (0.9); 0 on neither


def test_the_archive_keeps_each_candidates_objective_scores_across_a_checkpoint():
    arch = archive_of("objective")
    again = [type(c).from_dict(c.to_dict()) for c in arch.candidates]
    assert [c.objective_scores for c in again] == OBJECTIVES


def objective_metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    base = toy.metric(gold, pred, trace, pred_name, pred_trace)
    correct = float(base.score)
    return dspy.Prediction(score=base.score, feedback=base.feedback,
                           objective_scores={"correct": correct, "short": 1.0 / (1 + len(str(pred.answer)))})


@pytest.mark.parametrize("frontier_type", FRONTIER_TYPES)
def test_a_search_runs_on_each_frontier_with_objective_scores(frontier_type):
    train, val = data()
    with dspy.context(lm=toy.actor_lm()):
        res = optimizer(metric=objective_metric, max_metric_calls=40,
                        gepa_kwargs={"frontier_type": frontier_type}).compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val)
    d = res.detailed_results
    assert len(d.candidates) >= 2 and d.per_objective_best_candidates is not None
    assert set(d.objective_pareto_front) == {"correct", "short"}
    kept = res.detailed_results.run.candidates
    assert len(kept) == len(d.candidates)
    res.close()


def test_an_objective_frontier_without_objective_scores_is_refused_after_the_seed():
    train, val = data()
    with dspy.context(lm=toy.actor_lm()), pytest.raises(MissingObjectivesError, match="objective_scores"):
        optimizer(max_metric_calls=40, gepa_kwargs={"frontier_type": "hybrid"}).compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val)


def test_an_unknown_frontier_is_refused_at_construction():
    with pytest.raises(InputError, match="frontier"):
        optimizer(gepa_kwargs={"frontier_type": "per_row"})
