"""detailed_results: every DspyGEPAResult field, with dspy.GEPA's shapes and indexing, plus the run record."""

from __future__ import annotations

import dspy
import pytest
from dspy.teleprompt.gepa.gepa import DspyGEPAResult

from dspy_adaptive import Library, RoutedProgram
from tests.core import toy
from tests.dropin.common import data, optimizer


@pytest.fixture(autouse=True)
def actor():
    with dspy.context(lm=toy.actor_lm()):
        yield


def test_every_dspy_gepa_result_field_with_the_same_shape():
    train, val = data()
    routed = optimizer(track_best_outputs=True).compile(dspy.Predict("question -> answer"), trainset=train,
                                                        valset=val)
    res = routed.detailed_results
    assert isinstance(res, DspyGEPAResult)
    n, v = len(res.candidates), len(val)
    assert n >= 2 and all(isinstance(c, RoutedProgram) for c in res.candidates)
    assert res.parents[0] == [None] and all(p != [None] and all(isinstance(i, int) for i in p)
                                            for p in res.parents[1:])
    assert len(res.val_aggregate_scores) == len(res.val_subscores) == len(res.discovery_eval_counts) == n
    assert all(set(s) == set(range(v)) for s in res.val_subscores)                 # keyed by valset index
    assert set(res.per_val_instance_best_candidates) == set(range(v))
    assert all(isinstance(s, set) for s in res.per_val_instance_best_candidates.values())
    assert res.best_idx == max(range(n), key=lambda i: res.val_aggregate_scores[i])
    assert res.best_candidate is res.candidates[res.best_idx]
    assert res.best_candidate.library == routed.library
    assert res.highest_score_achieved_per_val_task == dict.fromkeys(range(v), 1.0)
    assert res.total_metric_calls == res.budget["spent"] and res.num_full_val_evals == n
    assert res.seed == 3 and res.log_dir is None
    # best outputs: per valset index, (candidate, Prediction) for every candidate on that row's front
    assert set(res.best_outputs_valset) == set(range(v))
    for i, outs in res.best_outputs_valset.items():
        assert {c for c, _ in outs} == res.per_val_instance_best_candidates[i]
        assert all(isinstance(p, dspy.Prediction) and p.answer == val[i].answer for _, p in outs)
    # no objective_scores from this metric
    assert res.val_aggregate_subscores is None and res.per_objective_best_candidates is None
    assert res.objective_pareto_front is None
    # the extras: the run record and each candidate's library
    assert res.run.candidates == res.libraries and isinstance(res.best_library, Library)
    assert res.row_ids == tuple(e.id for e in val)
    assert res.origins[0] == "seed" and res.proposals and isinstance(res.usage, dict)
    d = res.to_dict()
    assert d["candidates"][0] == {"router": res.libraries[0].router} and d["best_idx"] == res.best_idx
    assert d["run"]["best_idx"] == res.best_idx
    # candidates run
    best = res.best_candidate
    assert best(question="add: 1 2").answer == "3"


def test_multi_objective_fields_when_the_metric_returns_objective_scores():
    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        ok = float(str(pred.answer).strip() == gold.answer)
        family = "arith" if gold.id.startswith("a") else "caps"
        return dspy.Prediction(score=ok, feedback="ok" if ok else "wrong",
                               objective_scores={"correct": ok, family: ok})

    train, val = data()
    res = optimizer(metric=metric).compile(dspy.Predict("question -> answer"), trainset=train,
                                           valset=val).detailed_results
    n = len(res.candidates)
    assert len(res.val_aggregate_subscores) == n
    assert res.val_aggregate_subscores[0] == {"correct": 0.5, "arith": 0.0, "caps": 1.0}
    assert res.objective_pareto_front["correct"] == max(s["correct"] for s in res.val_aggregate_subscores)
    best_correct = {i for i, s in enumerate(res.val_aggregate_subscores)
                    if s["correct"] == res.objective_pareto_front["correct"]}
    assert res.per_objective_best_candidates["correct"] == best_correct
    assert 0 in res.per_objective_best_candidates["caps"]
