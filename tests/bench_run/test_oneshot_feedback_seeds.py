"""One-shot control, the scalar-feedback ablation and multi-seed runs."""

from __future__ import annotations

import json

import dspy

from benchmarks import run as bench
from benchmarks.feedback import ScalarFeedback
from benchmarks.oneshot import run_one_shot
from dspy_adaptive import AdaptiveGEPA
from dspy_adaptive.reflection.propose import source_problem
from dspy_adaptive.testing import scripted_lm
from tests.conftest import SHARED_DATA
from tests.core import toy

TINY = ["--scripted", "--data", str(SHARED_DATA), "--sizes", "2,2,2", "--num-threads", "4", "--no-progress"]


def test_one_shot_makes_exactly_one_reflection_call_and_keeps_only_what_the_policy_allows():
    def respond(call):
        assert set(call.output_fields) >= {"router", "specialists"}
        for words in ("competition mathematics", "program contract", "spend up to 500 scored calls"):
            assert words in call.prompt.replace("Write exactly one class", "program contract"), words
        return {"router": "Route maths to 1.", "specialists": [
            {"description": "Maths.", "program": toy.ADD_SOURCE, "profile": "deep"},
            {"description": "Reads files.", "program": toy.BAD_SOURCE, "profile": "fast"}]}

    lm = scripted_lm(respond)
    run = run_one_shot(reflection_lm=lm, families=["aime", "hotpotqa"], tools={"search": len}, max_specialists=3,
                       budget=500, input_names=("question",), output_names=("answer",))
    assert len(lm.scripted.calls) == 1 and run.metric_calls == 0
    assert run.library.active_ids() == (1,) and run.library.router == "Route maths to 1."
    assert source_problem(run.library.slot(1).program_source) is None
    assert len(run.rejected) == 1 and "os" in run.rejected[0]["reason"]


def test_scalar_feedback_leaves_no_per_dimension_text_in_any_reflection_prompt():
    train, val = toy.make_examples(4), toy.make_examples(4, offset=100)
    refl = toy.reflection_lm(program_source=toy.WRONG_SOURCE, vary=True)
    with dspy.context(lm=toy.actor_lm()):
        AdaptiveGEPA(ScalarFeedback(toy.metric), reflection_lm=refl, max_metric_calls=60, reflection_minibatch_size=4,
                     seed=3, use_merge=False, progress=False).compile(dspy.Predict("question -> answer"),
                                                                      trainset=train, valset=val)
    prompts = refl.scripted.prompts()
    assert prompts
    assert not any("wrong: expected" in p for p in prompts)              # the metric's own words never appear
    assert any("Score: 0.000" in p for p in prompts)                   # only the score does
    decomposed = toy.reflection_lm(program_source=toy.WRONG_SOURCE, vary=True)
    with dspy.context(lm=toy.actor_lm()):
        AdaptiveGEPA(toy.metric, reflection_lm=decomposed, max_metric_calls=60, reflection_minibatch_size=4, seed=3,
                     use_merge=False, progress=False).compile(dspy.Predict("question -> answer"), trainset=train,
                                                              valset=val)
    assert any("wrong: expected" in p for p in decomposed.scripted.prompts())   # (the control)


def test_seeds_run_one_directory_each_and_resume(tmp_path, capsys):
    out = tmp_path / "seedruns"
    bench.main(["--method", "seed", "--budget", "10", "--out", str(out), "--seeds", "0,1"] + TINY)
    for seed in (0, 1):
        res = json.loads((out / f"seed-{seed}" / "results.json").read_text())
        assert res["config"]["seed"] == seed
    capsys.readouterr()
    bench.main(["--method", "seed", "--budget", "10", "--out", str(out), "--seeds", "0,1"] + TINY)
    assert capsys.readouterr().out.count("finished") == 2


def test_feedback_scalar_is_part_of_the_configuration(tmp_path):
    args = bench.parse_args(["--method", "seed", "--out", str(tmp_path), "--feedback", "scalar"] + TINY)
    assert bench.config_of(args, None, 4)["feedback"] == "scalar"
    args = bench.parse_args(["--method", "seed", "--out", str(tmp_path)] + TINY)
    assert "feedback" not in bench.config_of(args, None, 4)
