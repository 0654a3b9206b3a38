"""Family 4: bad input refused before any LM call; metric faults recorded at run time (bad_inputs.py)."""

from __future__ import annotations

import pytest

from benchmarks.hardening.bad_inputs import BAD_RETURNS, CASES, run_case, run_metric_faults


def test_enough_cases():
    assert len(CASES) >= 15


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_refused_before_any_lm_call_naming_problem_and_fix(case, tmp_path):
    out = run_case(case, tmp_path)
    assert out.ok, out.detail


def test_metric_faults_are_handled_and_recorded(tmp_path):
    m = run_metric_faults(tmp_path / "run")
    assert m["metric"]["bad_return"] >= len(BAD_RETURNS) and m["metric"]["raised"] >= 1
    # every None / NaN / str / inf return and every raise is one recorded metric fault, scored failure_score
    assert m["faults"]["metric_faults"] == m["metric"]["bad_return"] + m["metric"]["raised"]
    assert m["notes"].get("returned", 0) == m["metric"]["bad_return"]
    assert m["notes"].get("raised") == m["metric"]["raised"]
    assert m["bad_scores"] == [0.0]
    # out-of-range (above perfect_score) is kept as a measurement, by design (negative utilities are real)
    assert m["out_of_range_scores"] == [7.0]
