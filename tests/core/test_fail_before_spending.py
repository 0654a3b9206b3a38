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
