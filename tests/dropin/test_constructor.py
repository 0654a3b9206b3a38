"""AdaptiveGEPA's constructor is dspy.GEPA's (3.4.1): every parameter accepted with the same default and meaning;
the mechanisms Adaptive-GEPA replaces raise one clear error; `auto` gives dspy.GEPA's budget; num_threads=None is
dspy.settings.num_threads; gepa_kwargs keys with a counterpart are mapped, the rest refused clearly."""

from __future__ import annotations

import inspect

import dspy
import pytest

from dspy_adaptive import AdaptiveGEPA
from dspy_adaptive.data import InputError
from dspy_adaptive.optimizers.gepa_compat import DSPY_GEPA_PARAMETERS
from dspy_adaptive.testing import scripted_lm
from tests.core import toy
from tests.dropin.common import data, optimizer


@pytest.fixture(autouse=True)
def actor():
    with dspy.context(lm=toy.actor_lm()):
        yield


def test_every_dspy_gepa_parameter_is_accepted_with_its_default():
    theirs = inspect.signature(dspy.GEPA.__init__).parameters
    ours = inspect.signature(AdaptiveGEPA.__init__).parameters
    assert tuple(theirs)[1:] == DSPY_GEPA_PARAMETERS          # the list we map is dspy's, in its order
    assert len(DSPY_GEPA_PARAMETERS) == 27                     # + self: dspy.GEPA's 28
    assert list(ours)[: len(theirs)] == list(theirs)           # same names, same order, first
    for name in DSPY_GEPA_PARAMETERS:
        assert ours[name].default == theirs[name].default, name
        assert ours[name].kind == theirs[name].kind, name


def test_all_carried_over_parameters_together():
    opt = AdaptiveGEPA(toy.metric, max_metric_calls=40, reflection_minibatch_size=2,
                       candidate_selection_strategy="current_best", reflection_lm=toy.reflection_lm(),
                       skip_perfect_score=False, add_format_failure_as_feedback=True, instruction_proposer=None,
                       code_proposer=None, component_selector="round_robin", use_merge=False,
                       max_merge_invocations=None, num_threads=2, failure_score=0.0, perfect_score=1.0,
                       log_dir=None, track_stats=True, use_wandb=False, wandb_api_key=None, wandb_init_kwargs=None,
                       track_best_outputs=True, warn_on_score_mismatch=False, use_mlflow=False, seed=None,
                       gepa_kwargs={"display_progress_bar": False, "cache_evaluation": True}, progress=False)
    assert opt.metric_fn is toy.metric and opt.progress is False
    train, val = data()
    res = opt.compile(dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
    assert res.best_outputs_valset is not None and isinstance(res.seed, int)


@pytest.mark.parametrize("name, value, words", [
    ("instruction_proposer", "not callable", "instruction_proposer must be callable"),
    ("component_selector", "all", "component_selector='all' is not supported.*action"),
    ("component_selector", "every", "component_selector='every' is not supported.*callable"),
])
def test_replaced_mechanisms_raise_one_clear_error(name, value, words):
    with pytest.raises(InputError, match=words):
        AdaptiveGEPA(toy.metric, max_metric_calls=10, reflection_lm=toy.reflection_lm(), **{name: value})


@pytest.mark.parametrize("kwargs, words", [
    ({"max_reflection_cost": 1.0}, "max_cost_usd"),
    ({"reflection_prompt_template": "x"}, "reflection_prompt_template"),
    ({"stop_callbacks": []}, "max_metric_calls"),
    ({"seed": 3}, r"AdaptiveGEPA\(seed=...\)"),
    ({"frontier_type": "pareto"}, "not one of gepa.s frontiers"),
    ({"no_such_key": 1}, "not an argument of gepa.optimize"),
])
def test_gepa_kwargs_without_counterpart_raise_clearly(kwargs, words):
    with pytest.raises(InputError, match=words):
        AdaptiveGEPA(toy.metric, max_metric_calls=10, reflection_lm=toy.reflection_lm(), gepa_kwargs=kwargs)


def test_gepa_kwargs_with_counterparts_are_mapped():
    pytest.importorskip("mlflow")
    opt = AdaptiveGEPA(toy.metric, max_metric_calls=10, reflection_lm=toy.reflection_lm(),
                       gepa_kwargs={"use_mlflow": True, "mlflow_tracking_uri": "file:///tmp/x",
                                    "mlflow_experiment_name": "e", "tracking_key_prefix": "p/",
                                    "val_evaluation_policy": "full_eval", "acceptance_criterion": "strict_improvement"})
    assert opt.use_mlflow and opt.tracking.mlflow_tracking_uri == "file:///tmp/x"
    assert opt.tracking.mlflow_experiment_name == "e" and opt.tracking.key_prefix == "p/"


def test_metric_signature_error_is_a_type_error_as_in_dspy():
    def bad_metric(example, prediction):
        return 0.0
    with pytest.raises(TypeError, match="five arguments"):
        AdaptiveGEPA(bad_metric, reflection_lm=toy.reflection_lm(), max_metric_calls=1)
    with pytest.raises(TypeError):
        dspy.GEPA(metric=bad_metric, reflection_lm=toy.reflection_lm(), max_metric_calls=1)


def test_track_best_outputs_needs_track_stats_as_in_dspy():
    with pytest.raises(InputError, match="track_stats"):
        AdaptiveGEPA(toy.metric, max_metric_calls=10, reflection_lm=toy.reflection_lm(), track_best_outputs=True)


class TwoPredictors(dspy.Module):
    def __init__(self):
        super().__init__()
        self.a = dspy.Predict("question -> draft")
        self.b = dspy.ChainOfThought("question, draft -> answer")

    def forward(self, question):
        return self.b(question=question, draft=self.a(question=question).draft)


@pytest.mark.parametrize("auto", ["light", "medium", "heavy"])
@pytest.mark.parametrize("program, with_val", [(lambda: dspy.Predict("question -> answer"), True),
                                               (TwoPredictors, True), (TwoPredictors, False)])
def test_auto_gives_dspy_gepa_budget_for_the_same_data(auto, program, with_val):
    from dspy.teleprompt.gepa.gepa import AUTO_RUN_SETTINGS, GEPA
    train, val = toy.make_examples(10), toy.make_examples(7, offset=100)
    student = program()
    theirs = GEPA(toy.metric, auto=auto, reflection_lm=toy.reflection_lm())
    expected = theirs.auto_budget(num_preds=len(student.named_predictors()),
                                  num_candidates=AUTO_RUN_SETTINGS[auto]["n"],
                                  valset_size=len(val) if with_val else len(train))
    ours = AdaptiveGEPA(toy.metric, auto=auto, reflection_lm=toy.reflection_lm())
    assert ours.config.budget.calls(student, len(train), len(val) if with_val else 0) == expected


def test_auto_budget_is_what_a_run_gets(monkeypatch):
    train, val = data()
    routed = optimizer(auto="light", max_metric_calls=None).compile(dspy.Predict("question -> answer"),
                                                                    trainset=train, valset=val)
    from dspy.teleprompt.gepa.gepa import GEPA
    assert routed.detailed_results.budget["max"] == GEPA.auto_budget(None, 1, 6, len(val))


def test_num_threads_none_is_dspy_settings_num_threads(monkeypatch):
    from dspy_adaptive.search import evaluate
    seen = []
    original = evaluate.Evaluator.__init__

    def spy(self, *a, **kw):
        seen.append(kw["num_threads"])
        original(self, *a, **kw)
    monkeypatch.setattr(evaluate.Evaluator, "__init__", spy)
    train, val = data()
    with dspy.context(num_threads=3):
        optimizer(num_threads=None, max_metric_calls=20).compile(dspy.Predict("question -> answer"), trainset=train,
                                                                 valset=val)
    optimizer(num_threads=2, max_metric_calls=20).compile(dspy.Predict("question -> answer"), trainset=train,
                                                          valset=val)
    assert seen == [3, 2]


@pytest.mark.parametrize("strategy", ["epsilon_greedy", "top_k_pareto"])
def test_gepa_candidate_selection_strategies_dspy_passes_through(strategy):
    train, val = data()
    res = optimizer(candidate_selection_strategy=strategy).compile(
        dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
    assert max(res.val_aggregate_scores) == pytest.approx(1.0)


def test_add_format_failure_as_feedback_shows_reflection_the_unparseable_answer():
    from dspy_adaptive.program.scoring import score_example
    lm = scripted_lm(lambda call: "I refuse to use your format: the answer is 4", model="scripted/rude")
    ex = dspy.Example(question="2+2?", answer="4").with_inputs("question")
    with dspy.context(lm=lm):
        plain = score_example(dspy.Predict("question -> answer"), ex, toy.metric)
        shown = score_example(dspy.Predict("question -> answer"), ex, toy.metric, format_failure_feedback=True)
    assert plain.error and shown.error and plain.score == shown.score == 0.0
    assert "The LM answered:" not in plain.feedback
    assert "could not be parsed" in shown.feedback
    assert shown.feedback.split("The LM answered:")[1].strip() == "I refuse to use your format: the answer is 4"
    assert optimizer(add_format_failure_as_feedback=True).add_format_failure_as_feedback is True


def test_instruction_and_code_proposers_write_the_rewrite_actions():
    calls = []

    def instruction_proposer(candidate, reflective_dataset, components_to_update):
        calls.append(("instruction", dict(candidate), dict(reflective_dataset), list(components_to_update)))
        text = toy.ARITH_DESCRIPTION if components_to_update[0].endswith("description") else \
            "Route every 'add:' request to slot 1."
        return dict.fromkeys(components_to_update, text)

    def code_proposer(candidate, reflective_dataset, components_to_update, task_descriptions, context_blurbs):
        calls.append(("code", dict(candidate), dict(reflective_dataset), list(components_to_update),
                      dict(task_descriptions), dict(context_blurbs)))
        n = sum(c[0] == "code" for c in calls)       # a new text each time (an activation is written by it too)
        return dict.fromkeys(components_to_update, f"```python\n{toy.ADD_SOURCE}\n# from the code proposer {n}\n```")

    state = {"n": 0}

    def respond(call):
        fields, specialists = call.output_fields, call.field("specialists") or ""
        if "action" in fields:
            state["n"] += 1
            if "(active" not in specialists:
                return {"action": "activate", "slot": "1"}
            return {"action": "rewrite_program" if state["n"] % 2 else "rewrite_router", "slot": "1"}
        if "profile" in fields:
            return {"description": toy.ARITH_DESCRIPTION, "program": toy.ADD_SOURCE, "profile": "fast"}
        return "garbage"   # the proposers write every rewrite: the reflection LM is never asked for one

    train, val = data()
    res = optimizer(scripted_lm(respond, model="scripted/reflection"), instruction_proposer=instruction_proposer,
                    code_proposer=code_proposer, max_metric_calls=80, skip_perfect_score=False).compile(
        dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
    kinds = {c[0] for c in calls}
    assert kinds == {"instruction", "code"}
    code = next(c for c in calls if c[0] == "code")
    assert code[3] == ["slot1.program"] and set(code[1]) == {"router", "slot1.description", "slot1.program"}
    records = code[2]["slot1.program"]
    assert records and set(records[0]) == {"Inputs", "Generated Outputs", "Feedback"}
    assert set(records[0]["Inputs"]) == {"question"}                 # inputs only: labels never reach a proposer
    assert code[4] == {"slot1.program": toy.ARITH_DESCRIPTION} and "dspy.Module" in code[5]["slot1.program"]
    activation = next(c for c in calls if c[0] == "instruction")        # the new slot's description first
    assert activation[3] == ["slot1.description"] and activation[1]["slot1.description"] == ""
    assert "dspy.ChainOfThought(" in activation[1]["slot1.program"]     # the starter its program is written from
    assert ["router"] in [c[3] for c in calls if c[0] == "instruction"]
    rewrites = [p for p in res.proposals if p["action"] in ("rewrite_program", "rewrite_router")]
    assert rewrites and all(p["child_hash"] is not None and p["failure"] in (None, "gate", "no_change")
                            for p in rewrites)


def test_seed_none_draws_a_seed_and_a_rerun_resumes_with_it(tmp_path):
    train, val = data()
    first = optimizer(seed=None, log_dir=str(tmp_path)).compile(dspy.Predict("question -> answer"), trainset=train,
                                                                valset=val).detailed_results
    again = optimizer(seed=None, log_dir=str(tmp_path)).compile(dspy.Predict("question -> answer"), trainset=train,
                                                                valset=val).detailed_results
    assert isinstance(first.seed, int) and again.seed == first.seed
    assert again.total_metric_calls == first.total_metric_calls          # resumed, not run again


def test_a_component_selector_chooses_the_action_and_target():
    seen = []

    def selector(state, trajectories, subsample_scores, candidate_idx, candidate):
        seen.append((state, candidate_idx, list(subsample_scores), sorted(candidate)))
        # activate slot 2 first, then rewrite its program
        return ["slot2.program"] if candidate["slot2.description"] != "INACTIVE" else ["slot2.description"]

    def respond(call):   # the reflection LM writes the edits only: it is never asked to select an action
        fields = call.output_fields
        assert "action" not in fields
        if "profile" in fields:
            return {"description": toy.ARITH_DESCRIPTION, "program": toy.ADD_SOURCE, "profile": "fast"}
        return {"new_program": toy.ADD_SOURCE + "\n# rewritten\n"}

    train, val = data()
    res = optimizer(scripted_lm(respond, model="scripted/reflection"), component_selector=selector,
                    max_metric_calls=60, skip_perfect_score=False).compile(
        dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
    actions = [(p["action"], p["slot"]) for p in res.proposals if p["kind"] == "reflect"]
    assert actions[0] == ("activate", 2) and ("rewrite_program", 2) in actions
    assert res.best_library.active_ids() == (2,) and max(res.val_aggregate_scores) == pytest.approx(1.0)
    state, idx, scores, names = seen[0]
    assert state.i == 0 and seen[1][0].i == 1 and idx is None and len(scores) == 4
    assert names == sorted(["router"] + [f"slot{k}.{part}" for k in range(1, 6) for part in ("description", "program")])
