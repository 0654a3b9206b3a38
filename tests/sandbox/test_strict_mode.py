"""isolation="strict" refuses to run without every OS layer, before any LM call; "warn" warns once."""

from __future__ import annotations

import warnings

import dspy
import pytest

from dspy_adaptive import AdaptiveGEPA, SandboxSettings
from dspy_adaptive.sandbox import IsolationReport, Layers, SandboxIsolationError, SandboxPool
from tests.core import toy


def test_strict_pool_refuses_missing_layers_and_names_them():
    with SandboxPool(isolation="strict", layers=Layers.only("rlimits", "seccomp")) as p:
        with pytest.raises(SandboxIsolationError) as ei:
            p.isolation_report()
    msg = str(ei.value)
    assert "landlock" in msg and "uid" in msg and "isolation='warn'" in msg


def test_warn_mode_warns_once_with_what_does_not_hold():
    with SandboxPool(layers=Layers.only("rlimits")) as p:
        with pytest.warns(RuntimeWarning, match="NOT enforced: .*landlock"):
            report = p.isolation_report()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert p.isolation_report() is report
    assert report.missing["seccomp"] == "switched off for this pool" and not report.complete


def test_the_report_is_measured_by_a_worker():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with SandboxPool() as p:
            report = p.isolation_report()
    assert report.applied["rlimits"] is True
    for layer in ("landlock", "seccomp", "uid"):
        assert report.applied.get(layer, False) == report.available[layer]
    assert set(report.to_dict()) >= {"platform", "root", "requested", "available", "applied", "missing"}


def test_a_strict_search_stops_before_any_lm_call(monkeypatch):
    incomplete = IsolationReport("linux", True, "strict", Layers().to_dict(), {"rlimits": True, "seccomp": False},
                                 missing={"seccomp": "libseccomp unavailable (simulated)"})
    monkeypatch.setattr(SandboxPool, "_measure_isolation", lambda self: incomplete)
    actor, refl = toy.actor_lm(), toy.reflection_lm()
    opt = AdaptiveGEPA(toy.metric, reflection_lm=refl, max_metric_calls=40, progress=False,
                       sandbox=SandboxSettings(isolation="strict"))
    with dspy.context(lm=actor), pytest.raises(SandboxIsolationError, match="seccomp"):
        opt.compile(dspy.Predict("question -> answer"), trainset=toy.make_examples(3), valset=toy.make_examples(3, 50))
    assert actor.scripted.prompts() == [] and refl.scripted.prompts() == []


def test_sandbox_settings_validate_the_mode():
    with pytest.raises(ValueError, match="isolation"):
        SandboxSettings(isolation="paranoid")
