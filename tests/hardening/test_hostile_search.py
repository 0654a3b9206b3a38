"""Family 1: the hostile sandbox corpus proposed inside a real search (see hostile_search.py)."""

from __future__ import annotations

import pytest

from benchmarks.hardening.hostile_search import corpus, run_hostile_search


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    return run_hostile_search(tmp_path_factory.mktemp("hostile"))


def test_every_source_is_rejected_or_contained(outcome):
    n = len(corpus())
    assert outcome.tried == n >= 40
    assert outcome.escaped == []
    assert outcome.rejected + outcome.contained == n
    expected = {c["stem"]: c["expect"] for c in corpus()}
    for stem, info in outcome.per_source.items():
        assert info["outcome"] == expected[stem], (stem, info)       # rejected statically vs contained at run time


def test_both_proposal_routes_were_exercised(outcome):
    modes = {info["mode"] for info in outcome.per_source.values()}
    assert modes == {"activate", "rewrite"}


def test_runtime_containment_reasons_are_specific(outcome):
    by_kind = {c["stem"]: c.get("kind") for c in corpus()}
    for stem, info in outcome.per_source.items():
        if info["outcome"] == "contained" and by_kind[stem]:
            assert info["errors"] and all(len(e) > 10 for e in info["errors"]), (stem, info)
            assert set(info["scores"]) == {-1.0}                       # failure_score, metric not consulted


def test_no_effect_outside_the_sandbox_and_no_secret_anywhere(outcome):
    assert outcome.effects == []            # canary, cwd, /tmp/pwned, the trainset objects, host dspy.Predict
    assert outcome.leaks == []              # run.json, state.json, evals.jsonl, report.md, LM prompts (feedback)


def test_no_hostile_program_gained_anything(outcome):
    assert outcome.won == []
    res = outcome.result
    assert res.origins == ["seed", "activate"]                            # seed + the one honest Adder
    for info in outcome.per_source.values():
        assert not info["accepted"]
    # tampering attempts (writing to the inputs, patching dspy / the shim / modules) never score a win
    for stem in ("inputs_mutation", "monkeypatch_dspy", "monkeypatch_shim_class", "patch_module"):
        info = outcome.per_source[stem]
        assert info["outcome"] == "contained" and max(info["scores"]) <= 0.0, (stem, info)


def test_the_search_runs_to_the_end_of_its_budget(outcome):
    assert outcome.stop_reason == "budget exhausted"
    assert outcome.budget["spent"] >= outcome.budget["max"]
    assert max(outcome.result.val_aggregate_scores) == 1.0                # and still found the real improvement
