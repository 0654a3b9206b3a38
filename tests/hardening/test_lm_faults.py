"""Family 2: LM faults on every role (see lm_faults.py for the ledger and its categories)."""

from __future__ import annotations

import logging

import pytest

from benchmarks.hardening.lm_faults import RAISE_KINDS, run_with_faults

CONFIGS = {"10%": dict(rate=0.1, num_retries=3), "35%-1-retry": dict(rate=0.35, num_retries=1)}


@pytest.fixture(scope="module", params=list(CONFIGS))
def outcome(request, tmp_path_factory):
    logging.getLogger("dspy.clients.lm").setLevel(logging.ERROR)    # "response was truncated" warnings
    return run_with_faults(tmp_path_factory.mktemp("faults"), **CONFIGS[request.param])


def test_run_completes(outcome):
    assert outcome.stop_reason == "budget exhausted"
    assert outcome.total_injected > 0 and set(outcome.engine_calls) == {"fast", "deep", "reflection"}
    assert all(outcome.injected_by_lm[n] for n in outcome.engine_calls)         # every role's LM was hit


def test_failed_rollouts_score_without_calling_the_metric(outcome):
    assert outcome.metric_calls == outcome.scored_calls - outcome.failed_rollouts


def test_retries_are_bounded(outcome):
    k = outcome.num_retries + 1
    for name, engine_calls in outcome.engine_calls.items():
        logical = outcome.logical_calls[name]
        assert engine_calls <= k * logical, name
        # every extra engine call is a retry after a transient fault; a logical call that still failed used
        # its last attempt on one
        raises = sum(v for kind, v in outcome.injected_by_lm[name].items() if kind in RAISE_KINDS)
        assert engine_calls - logical == raises - outcome.failed_logical_calls.get(name, 0), name
    assert outcome.max_backoff <= 60                                           # DSPy's backoff cap


def test_every_injected_fault_is_accounted_for(outcome):
    assert outcome.unattributed == 0
    assert outcome.total_injected == outcome.accounted
    assert outcome.unexplained_failures == 0                    # no predictor call failed without a fault
    assert outcome.problems == []                               # failed calls per role == what run.json shows
    assert outcome.records_by_role["reflection"] == outcome.failed_reflections
    # a bad completion can only slip through the adapter when it is a truncation that still parses; each
    # such one met a downstream check (a recorded rejection / the gate / the metric)
    assert set(outcome.silent) <= {"truncated"}
    assert sum(outcome.degraded.values()) == sum(outcome.silent.values())
