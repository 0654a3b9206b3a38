"""Replay of an archived merge: the index merge loses a specialist that the aligned merge keeps."""

from __future__ import annotations

import json

import dspy
import pytest

from benchmarks import replay as rp
from dspy_adaptive import AdaptiveGEPA
from tests.core import toy


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("merge_run")
    train, val = toy.make_examples3(4), toy.make_examples3(4, offset=100)
    with dspy.context(lm=toy.scripted_lm(toy.router3_respond)):
        opt = AdaptiveGEPA(toy.metric, reflection_lm=toy.branching_reflection_lm(), max_metric_calls=150,
                           reflection_minibatch_size=3, seed=1, use_merge=True, merge_cadence=2,
                           progress=False, log_dir=str(d))
        opt.compile(dspy.Predict("question -> answer"), trainset=train, valset=val).close()
    return d


def test_index_merge_loses_a_specialist_the_aligned_merge_keeps(run_dir, capsys):
    assert rp.main([str(run_dir)]) == 0
    printed = capsys.readouterr().out
    data = json.loads((run_dir / "replay.json").read_text())
    roles = {toy.ARITH_DESCRIPTION, toy.REV_DESCRIPTION}
    hits = []
    for e in data["events"]:
        kept = {s: {k["description"] for k in e["strategies"][s]["kept"]} for s in rp.STRATEGIES}
        if len(kept["index"] & roles) == 1 and kept["mutual_best"] >= roles:
            hits.append(e)
            lost = roles - kept["index"]
            assert kept["hungarian"] >= roles
            # aligned projection credits the other parent's specialist on its rows: higher than the index child
            assert e["strategies"]["mutual_best"]["projected_mean"] > e["strategies"]["index"]["projected_mean"]
            assert lost
    assert hits, "expected an event where two branches put different roles in slot 1"
    e = hits[0]
    base_lib = e["base"]
    assert "| index |" in printed and "| mutual_best |" in printed and "| hungarian |" in printed
    # measured child (accepted live merge, mutual_best) matches the projection in this deterministic toy
    if e["accepted"]:
        assert abs(e["measured_child_mean"] - e["strategies"]["mutual_best"]["projected_mean"]) < 1e-9
    assert isinstance(base_lib, int)


def test_missing_run_json_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="run.json"):
        rp.replay(tmp_path)
