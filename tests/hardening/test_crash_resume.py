"""Family 3: kill -9 at three deterministic points (plus one with merges), resume, compare (crash_resume.py)."""

from __future__ import annotations

import pytest

from benchmarks.hardening.crash_resume import POINTS, crash_and_resume, reference


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("crash")
    return tmp, {s: reference(tmp, s) for s in sorted({s for s, _ in POINTS})}


@pytest.fixture(scope="module")
def outcomes(refs):
    tmp, ref = refs
    return {(s, p): crash_and_resume(tmp, s, p, ref[s]) for s, p in POINTS}


@pytest.mark.parametrize("scenario, point", POINTS, ids=[f"{s}-{p}" for s, p in POINTS])
def test_kill_and_resume_loses_nothing(outcomes, scenario, point):
    o = outcomes[(scenario, point)]
    assert o.killed                                   # really SIGKILLed, then resumed to completion
    assert o.state_parseable                          # state.json never corrupt
    assert o.accepted_before >= 1 and o.lost_accepted == []
    assert o.equal_to_reference, o.diff               # hashes, per-row scores, parents, budget by kind, proposals


@pytest.mark.parametrize("scenario, point", POINTS, ids=[f"{s}-{p}" for s, p in POINTS])
def test_spent_budget_is_never_undercounted(outcomes, scenario, point):
    o = outcomes[(scenario, point)]
    assert o.spent + o.lost_to_interruptions >= o.real_calls, o
