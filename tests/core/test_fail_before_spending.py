"""Fail before spending (issue 28): every LM role is checked before the first scored call, and a run whose first
scored calls all fail for a configuration reason stops at once -- naming the role, the model and the fix -- with
nothing charged and no files that would refuse the corrected rerun. No network: a fake provider (litellm's
completion replaced) refuses the key, and scripted LMs raise DSPy's own LM errors."""

from __future__ import annotations

import json

import dspy
import litellm
import pytest
from dspy.utils.exceptions import LMAuthError, LMConfigurationError

from dspy_adaptive import AdaptiveGEPA
from dspy_adaptive.lm.preflight import (
    FirstCallsGuard,
    LMRole,
    LMSetupError,
    check_lms,
    configuration_reason,
    lm_roles,
    row_reason,
)
from dspy_adaptive.schema import RowResult
from dspy_adaptive.testing import scripted_lm
from tests.core import toy


@pytest.fixture
def data():
    return toy.make_examples(3), toy.make_examples(3, offset=100)


def optimizer(reflection, log_dir=None, metric=toy.metric, **kw):
    return AdaptiveGEPA(metric, reflection_lm=reflection, max_metric_calls=40, reflection_minibatch_size=4,
                        seed=3, use_merge=False, progress=False, log_dir=log_dir, num_threads=1, **kw)


@pytest.fixture
def refusing_provider(monkeypatch):
    """litellm's completion replaced by a provider that refuses every key (what OpenAI answers a revoked key)."""
    seen = []

    def completion(*args, **kwargs):
        seen.append(kwargs.get("model"))
        raise litellm.AuthenticationError(message="Incorrect API key provided: sk-bad", llm_provider="openai",
                                          model=kwargs.get("model", "?"))

    monkeypatch.setattr(litellm, "completion", completion)
    return seen


def hosted(model="openai/gpt-4.1-mini"):
    return dspy.LM(model, engine="litellm", api_key="sk-bad", cache=False)


def test_a_refused_reflection_key_stops_the_run_before_its_first_scored_call(data, tmp_path, refusing_provider):
    train, val = data
    actor = toy.actor_lm()
    with dspy.context(lm=actor), pytest.raises(LMSetupError) as err:
        optimizer(hosted(), log_dir=str(tmp_path / "run")).compile(dspy.Predict("question -> answer"),
                                                                   trainset=train, valset=val)
    text = str(err.value)
    assert "reflection_lm" in text and "openai/gpt-4.1-mini" in text and "authentication" in text
    assert "Fix: check the API key" in text and "nothing was scored" in text
    assert isinstance(err.value, LMConfigurationError)              # catchable as DSPy's own LM error
    assert refusing_provider == ["openai/gpt-4.1-mini"]              # one check call, no retries
    assert actor.scripted.calls == []                                # not one rollout
    assert not (tmp_path / "run" / "identity.json").exists()         # nothing left to refuse the fixed rerun

    # the corrected rerun into the same log_dir starts fresh (not "another run")
    with dspy.context(lm=actor):
        routed = optimizer(toy.reflection_lm(), log_dir=str(tmp_path / "run")).compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val)
    assert json.loads((tmp_path / "run" / "state.json").read_text())["budget"]
    routed.close()


def test_a_missing_configured_lm_is_named_with_its_fix(data):
    train, val = data
    with dspy.context(lm=None), pytest.raises(LMSetupError) as err:
        optimizer(toy.reflection_lm()).compile(dspy.Predict("question -> answer"), trainset=train, valset=val)
    assert "fast_lm" in str(err.value) and "dspy.configure(lm=" in str(err.value)


def test_the_judge_inside_the_metric_is_checked_too(refusing_provider):
    class Judged:
        def __init__(self):
            self.metrics = {"pupa": type("Pupa", (), {})()}
            self.metrics["pupa"].judge_lm = hosted("openai/gpt-4.1-nano")

        def __call__(self, gold, pred, trace=None, pred_name=None, pred_trace=None):
            return 1.0

    roles = lm_roles(fast_lm=toy.actor_lm(), deep_lm=toy.actor_lm(), metric=Judged(),
                     extra={"reflection_lm": toy.reflection_lm()})
    names = [r.role for r in roles]
    assert "the metric's metrics['pupa'].judge_lm" in names
    with pytest.raises(LMSetupError, match=r"metric's metrics\['pupa'\]\.judge_lm: openai/gpt-4.1-nano"):
        check_lms(roles)
    assert refusing_provider == ["openai/gpt-4.1-nano"]              # the scripted LMs are never called


def test_engines_of_their_own_are_not_called_and_transient_errors_only_warn():
    scripted = toy.actor_lm()
    check_lms([LMRole("fast_lm", scripted)])
    assert scripted.scripted.calls == []

    def rate_limited(lm):
        raise litellm.RateLimitError(message="slow down", llm_provider="openai", model="gpt-4.1-mini")

    with pytest.warns(RuntimeWarning, match="could not check"):
        check_lms([LMRole("fast_lm", hosted())], call=rate_limited)


def test_first_rollouts_failing_for_a_configuration_reason_stop_the_run_uncharged(data, tmp_path):
    train, val = data
    n = {"calls": 0}

    def refuse(call):
        n["calls"] += 1
        raise LMAuthError("invalid x-api-key", model="anthropic/claude-x")

    actor = scripted_lm(refuse, model="anthropic/claude-x")
    reflection = toy.reflection_lm()
    with pytest.raises(LMSetupError) as err:
        optimizer(reflection, log_dir=str(tmp_path / "run"), fast_lm=actor, deep_lm=actor).compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val)
    text = str(err.value)
    assert "fast_lm" in text and "deep_lm" in text and "anthropic/claude-x" in text and "authentication" in text
    assert "invalid x-api-key" in text and "were not charged" in text
    assert n["calls"] <= 4 * 2                        # the guard's limit (each row may try the adapter twice)
    assert reflection.scripted.calls == []
    assert not (tmp_path / "run" / "identity.json").exists()


def test_a_small_first_evaluation_that_only_failed_stops_too():
    guard = FirstCallsGuard([LMRole("deep_lm", toy.actor_lm())], limit=10)
    bad = _row("LMNotConfiguredError: [scripted/actor] no API key found", "LMNotConfiguredError")
    assert guard.admit("a", bad) == []
    with pytest.raises(LMSetupError, match="deep_lm: scripted/actor"):
        guard.evaluation_done()
    assert guard.admit("late", _row(None, None)) == []          # calls still finishing are not logged


def test_one_good_call_releases_the_held_ones_and_the_guard_stands_down():
    guard = FirstCallsGuard(limit=3)
    bad = _row("LMTransportError: [x] connection refused", "LMTransportError")
    assert guard.admit(1, bad) == [] and guard.admit(2, bad) == []
    assert guard.admit(3, _row("ValueError: the program raised", "ValueError")) == [1, 2, 3]
    assert guard.admit(4, bad) == [4]                           # later failures are ordinary failed rollouts
    guard.evaluation_done()


@pytest.mark.parametrize("kinds, message, reason", [
    (["LMNotConfiguredError"], "no API key found", "not configured"),
    (["AuthenticationError"], "Incorrect API key", "authentication"),
    (["LMInvalidRequestError"], "litellm.BadRequestError: LLM Provider NOT provided. You passed model=lcoal",
     "model not found"),
    (["BadRequestError"], "The model `gpt-9` does not exist", "model not found"),
    (["BadRequestError"], "max_tokens is too large", None),
    (["LMTransportError"], "failed to connect to 127.0.0.1:8000", "connection"),
    (["ConnectionRefusedError"], "[Errno 111]", "connection"),
    (["LMRateLimitError"], "rate limited", None),
    (["AdapterParseError"], "could not parse", None),
    (["ValueError"], "LM must be an instance of `dspy.BaseLM`, not a string. Instead of using a string like ...",
     "not a dspy.BaseLM"),
    (["ValueError"], "No LM is loaded. Please configure the LM using `dspy.configure(lm=dspy.LM(...))`",
     "not configured"),
    (["ValueError"], "the program raised", None),
])
def test_configuration_reasons(kinds, message, reason):
    assert configuration_reason(kinds, message) == reason


def test_a_row_reason_reads_the_recorded_error():
    assert row_reason(_row("LMAuthError: [m] bad key", "LMAuthError")) == "authentication"
    assert row_reason(_row(None, None)) is None


def _row(error, kind):
    return RowResult(row_id="r", score=0.0, feedback="", output=None, selected=None, executed=None,
                     fallback_reason=None, error=error, steps=(), error_kind=kind)


def test_the_judge_inside_the_metric_is_part_of_the_runs_identity(data, tmp_path):
    """A rerun with another judge is another run (its scores differ): refused, naming the judge."""
    from dspy_adaptive.search.checkpoint import ResumeMismatchError

    class Judged:
        def __init__(self, judge):
            self.judge_lm = judge

        def __call__(self, gold, pred, trace=None, pred_name=None, pred_trace=None):
            return toy.metric(gold, pred)

    train, val = data
    with dspy.context(lm=toy.actor_lm()):
        optimizer(toy.reflection_lm(), log_dir=str(tmp_path / "run"), metric=Judged(toy.actor_lm())) \
            .compile(dspy.Predict("question -> answer"), trainset=train, valset=val).close()
        other = scripted_lm(lambda call: {"answer": "x"}, model="scripted/other-judge")
        with pytest.raises(ResumeMismatchError, match=r"metric_lms.judge_lm.model: was \"scripted/actor\""):
            optimizer(toy.reflection_lm(), log_dir=str(tmp_path / "run"), metric=Judged(other)).compile(
                dspy.Predict("question -> answer"), trainset=train, valset=val)


def test_roles_sharing_a_failing_model_are_named_together(refusing_provider):
    with pytest.raises(LMSetupError) as err:
        check_lms([LMRole("fast_lm", hosted()), LMRole("deep_lm", hosted()), LMRole("reflection_lm", toy.actor_lm())])
    assert str(err.value).startswith("fast_lm and deep_lm: openai/gpt-4.1-mini is not usable (authentication)")


# -- an LM role given something that is not an LM (a model name, a function) --------------------------------------

@pytest.fixture
def no_provider(monkeypatch):
    """litellm's completion replaced: any provider request fails the test (nothing may be called)."""
    def completion(*args, **kwargs):
        raise AssertionError(f"a provider was called: {kwargs.get('model')}")

    monkeypatch.setattr(litellm, "completion", completion)


@pytest.mark.parametrize("where, value, named, fix", [
    ("reflection_lm", "openai/gpt-4.1", "reflection_lm: 'openai/gpt-4.1' is not usable (not a dspy.BaseLM)",
     'reflection_lm=dspy.LM("openai/gpt-4.1")'),
    ("fast_lm", "openai/gpt-4.1-mini", "fast_lm (router, fast specialists): 'openai/gpt-4.1-mini'",
     'fast_lm=dspy.LM("openai/gpt-4.1-mini")'),
    ("deep_lm", "openai/gpt-4.1", "deep_lm (your program as the fallback, deep specialists): 'openai/gpt-4.1'",
     'deep_lm=dspy.LM("openai/gpt-4.1")'),
    ("configured", "openai/gpt-4.1-mini", "the configured LM: 'openai/gpt-4.1-mini'",
     'dspy.configure(lm=dspy.LM("openai/gpt-4.1-mini"))'),
    ("reflection_lm", lambda prompt: "x", "reflection_lm: a function (<lambda>) is not usable",
     "reflection_lm=dspy.LM("),
    ("predictor", "openai/gpt-4.1-nano", "your program's self.lm: 'openai/gpt-4.1-nano'",
     'your_program.lm = dspy.LM("openai/gpt-4.1-nano")'),
])
def test_a_value_that_is_not_an_lm_in_any_role_stops_the_run_before_any_call(data, tmp_path, no_provider, where,
                                                                              value, named, fix):
    train, val = data
    actor, reflection = toy.actor_lm(), toy.reflection_lm()
    student = dspy.Predict("question -> answer")
    kw = {}
    if where in ("fast_lm", "deep_lm"):
        kw[where] = value
    if where == "predictor":
        student.lm = value
    configured = value if where == "configured" else actor
    with dspy.context(lm=configured), pytest.raises(LMSetupError) as err:
        optimizer(value if where == "reflection_lm" else reflection, log_dir=str(tmp_path / "run"), **kw).compile(
            student, trainset=train, valset=val)
    text = str(err.value)
    assert named in text and f"Fix: use {fix}" in text and "nothing was scored" in text
    if callable(value):
        assert "plain function str -> str (gepa's LanguageModel protocol) is not accepted" in text
    assert err.value.reason == "not a dspy.BaseLM"
    assert actor.scripted.calls == [] and reflection.scripted.calls == []          # no LM call at all
    assert not (tmp_path / "run" / "evals.jsonl").exists()                         # no scored call
    assert not (tmp_path / "run" / "identity.json").exists()                       # the fixed rerun starts fresh


def test_dspys_own_refusal_of_a_string_lm_stops_the_run_at_its_first_scored_calls(data, tmp_path):
    """A string LM the preflight cannot see (set inside the program's forward): DSPy refuses it with a plain
    ValueError, which the first-calls guard reads as a configuration fault -- the run stops uncharged."""
    class Sneaky(dspy.Module):
        def __init__(self):
            super().__init__()
            self.answer = dspy.Predict("question -> answer")

        def forward(self, question):
            with dspy.context(lm="openai/gpt-4.1-mini"):
                return self.answer(question=question)

    train, val = data
    reflection = toy.reflection_lm()
    with dspy.context(lm=toy.actor_lm()), pytest.raises(LMSetupError) as err:
        optimizer(reflection, log_dir=str(tmp_path / "run")).compile(Sneaky(), trainset=train, valset=val)
    text = str(err.value)
    assert "(not a dspy.BaseLM)" in text and "LM must be an instance of `dspy.BaseLM`" in text
    assert "were not charged or logged" in text
    assert reflection.scripted.calls == []
    assert not (tmp_path / "run" / "identity.json").exists()


def test_usable_lms_and_what_was_given():
    from dspy_adaptive.lm.preflight import given, usable_lm

    assert usable_lm(toy.actor_lm()) and usable_lm(hosted())
    assert not any(usable_lm(v) for v in ("openai/gpt-4.1", lambda p: p, dspy.LM, 3))
    assert given("openai/x") == "the string 'openai/x'"
    assert given(dspy.LM).startswith("the class dspy.") and "not an instance" in given(dspy.LM)


# -- a metric that faults on every row -----------------------------------------------------------------------------

def _typo_metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    return float(pred.answr == gold.answer)       # AttributeError on every row


@pytest.mark.parametrize("metric, shown", [
    (_typo_metric, "metric raised AttributeError: 'Prediction' object has no attribute 'answr'"),
    (lambda gold, pred, trace=None, pred_name=None, pred_trace=None: "yes", "non-numeric score 'yes'"),
    (lambda gold, pred, trace=None, pred_name=None, pred_trace=None: None, "non-numeric score None"),
    (lambda gold, pred, trace=None, pred_name=None, pred_trace=None: dspy.Prediction(score=None, feedback="?"),
     "non-numeric score None"),
])
def test_a_metric_faulting_on_every_seed_row_stops_before_any_reflection(data, tmp_path, metric, shown):
    from dspy_adaptive.data import InputError
    from dspy_adaptive.lm.preflight import MetricFaultError

    train, val = data
    reflection = toy.reflection_lm()
    with dspy.context(lm=toy.actor_lm()), pytest.raises(MetricFaultError) as err:
        optimizer(reflection, log_dir=str(tmp_path / "run"), metric=metric).compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val)
    text = str(err.value)
    assert isinstance(err.value, InputError) and isinstance(err.value, ValueError)
    assert f"The metric failed on all {len(val)} scored calls" in text and shown in text
    assert "Fix the metric" in text and "The program's predictions have the fields: answer" in text
    assert err.value.calls == len(val)
    assert reflection.scripted.calls == []                                        # no proposal, no reflection
    assert not (tmp_path / "run" / "evals.jsonl").exists()                        # nothing charged or logged
    assert not (tmp_path / "run" / "identity.json").exists()

    # the corrected metric (same name, same log_dir) starts a fresh run rather than replaying the faulty scores
    with dspy.context(lm=toy.actor_lm()):
        optimizer(toy.reflection_lm(), log_dir=str(tmp_path / "run")).compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val).close()
    logged = [json.loads(line)["result"] for line in (tmp_path / "run" / "evals.jsonl").read_text().splitlines()]
    assert logged and not any(r["metric_note"] for r in logged)


def test_a_metric_scoring_zero_everywhere_is_not_a_fault(data):
    train, val = data
    reflection = toy.reflection_lm()
    zero = lambda gold, pred, trace=None, pred_name=None, pred_trace=None: 0.0     # noqa: E731
    with dspy.context(lm=toy.actor_lm()):
        routed = optimizer(reflection, metric=zero, track_stats=True).compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val)
    assert routed.detailed_results.total_metric_calls >= 40          # the budget ran: the run was not stopped
    assert reflection.scripted.calls                                  # and it reflected
    routed.close()


def test_the_guard_holds_metric_faults_until_a_whole_evaluation_had_nothing_else():
    from dspy_adaptive.lm.preflight import MetricFaultError

    fault = _scored(0.0, "metric raised KeyError: 'label'")
    guard = FirstCallsGuard(limit=2)
    assert [guard.admit(i, fault) for i in range(5)] == [[]] * 5      # no early stop at the limit for metric faults
    with pytest.raises(MetricFaultError, match="metric raised KeyError: 'label'"):
        guard.evaluation_done()

    guard = FirstCallsGuard()                                         # a legitimate 0.0 releases them
    assert guard.admit(1, fault) == [] and guard.admit(2, _scored(0.0, None)) == [1, 2]
    guard.evaluation_done()

    guard = FirstCallsGuard()                                         # a metric fault after a configuration fault
    lm_fault = _row("LMAuthError: [m] bad key", "LMAuthError")
    assert guard.admit(1, lm_fault) == [] and guard.admit(2, fault) == [1, 2]

    guard = FirstCallsGuard()                   # a resumed evaluation whose logged rows scored: not every row faulted
    assert guard.admit(1, fault) == []
    assert guard.evaluation_done(replayed=[_scored(1.0, None)]) == [1]
    assert guard.admit(2, fault) == [2]


def _scored(score, note):
    return RowResult(row_id="r", score=score, feedback="", output={"answer": "x"}, selected=None, executed=None,
                     fallback_reason=None, error=None, steps=(), metric_note=note)
