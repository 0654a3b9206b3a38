"""Hostile corpus (benchmarks/hardening/hostile/*.py): each source is rejected statically or contained at run time.

Header of each file:  # escape: <label>   # expect: rejected|contained   [# kind: <SpecialistError kind>]

Rejected sources are ALSO run through the worker with the host's static policy bypassed
(RestrictedPython compile + runtime guards only), so a bug in policy.check alone is not an escape.
The whole corpus runs twice: with every layer on, and with every OS layer switched off (no seccomp,
Landlock, uid, namespace or rlimits), so the Python-level layers are shown to hold on their own.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from benchmarks.hardening.attacks import HOSTILE_DIR, SECRET
from dspy_adaptive.sandbox import SpecialistError, compile_program
from dspy_adaptive.sandbox.errors import KINDS
from dspy_adaptive.sandbox.testing import FakeBridge, run_bypassing_policy

HOSTILE = sorted(HOSTILE_DIR.glob("*.py"))


def meta(src: str) -> dict:
    head = dict(re.findall(r"^# (escape|expect|kind): (.+)$", src, re.M))
    assert head.get("expect") in ("rejected", "contained"), "missing '# expect:' header"
    assert head.get("escape"), "missing '# escape:' header"
    return head


def test_corpus_size():
    kinds = [meta(p.read_text())["expect"] for p in HOSTILE]
    assert len(HOSTILE) >= 40 and kinds.count("rejected") >= 30 and kinds.count("contained") >= 15


def _outcome(fn):
    try:
        return fn()
    except SpecialistError as e:
        assert e.kind in KINDS and e.reason, e
        return e


@pytest.fixture
def host_state(tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("original")
    cwd = Path.cwd()
    before = set(os.listdir(cwd))
    yield canary
    assert canary.read_text() == "original"
    assert sorted(os.listdir(tmp_path)) == ["canary.txt"]
    assert set(os.listdir(cwd)) == before, "a file appeared in the host cwd"
    assert not Path("/tmp/pwned").exists()


def _no_secret(outcome) -> None:
    text = repr(outcome) + (outcome.reason + outcome.stdout if isinstance(outcome, SpecialistError) else "")
    assert SECRET not in text


@pytest.fixture(scope="module")
def policy_only_pool():
    import warnings

    from dspy_adaptive.sandbox import Layers, SandboxPool

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with SandboxPool(max_workers=2, timeout=1.5, memory_mb=256, max_output_bytes=1_000_000,
                         max_predictor_calls=20, tool_names=("search",), layers=Layers.none()) as p:
            p.isolation_report()
            yield p


@pytest.fixture(params=["all_layers", "policy_only"])
def any_pool(request, pool, policy_only_pool):
    """The same corpus against every layer, and against the Python-level layers alone. Without rlimits a
    memory bomb is not stopped by the policy (it is not its class): those sources need the full pool."""
    return pool if request.param == "all_layers" else policy_only_pool


NEEDS_RLIMITS = {"memory_bomb", "memory_bomb_gradual"}


@pytest.mark.parametrize("path", HOSTILE, ids=[p.stem for p in HOSTILE])
def test_hostile_source(path, any_pool, pool, host_state):
    if any_pool is not pool and path.stem in NEEDS_RLIMITS:
        pytest.skip("memory exhaustion is the rlimits' class, not the policy's")
    pool = any_pool
    src = path.read_text()
    m = meta(src)
    inputs = {"canary": str(host_state)}
    res = compile_program(src)
    if m["expect"] == "rejected":
        assert not res.ok and res.program is None, f"{m['escape']}: should be rejected"
        assert res.reasons and all(re.match(r"line \d+: .{10,}", r) for r in res.reasons), res.reasons
        assert SECRET not in " ".join(res.reasons)
        # defence in depth: same source, host policy bypassed, restricted worker path
        out = _outcome(lambda: run_bypassing_policy(pool, src, inputs, FakeBridge()))
        _no_secret(out)
        if not isinstance(out, SpecialistError):
            assert path.stem in BYPASS_HARMLESS, f"{m['escape']}: ran without the static policy and returned {out!r}"
    else:
        assert res.ok, f"{m['escape']}: expected to pass the static policy, got {res.reasons}"
        bridge = FakeBridge()
        out = _outcome(lambda: pool.run(res.program, inputs, bridge))
        _no_secret(out)
        assert inputs == {"canary": str(host_state)}
        if "kind" in m:
            assert isinstance(out, SpecialistError), f"{m['escape']}: expected {m['kind']}, got {out!r}"
            assert out.kind == m["kind"], out
        # the pool still works afterwards (a killed worker was replaced)
        ok = compile_program("class S(dspy.Module):\n    def forward(self, x):\n        return dspy.Prediction(a=x)\n")
        assert pool.run(ok.program, {"x": 1}, bridge) == {"a": 1}


#: Rejected sources that, with the static policy bypassed, run to a harmless result (they are
#: rejected for hygiene, but the runtime would have contained them anyway).
BYPASS_HARMLESS = {
    "decorator_at_import",  # a user decorator is restricted code like any other: it only prints
    "trojan_source_bidi",   # a display attack on people reading the code: at run time it is a string compare
}


def test_specific_runtime_reasons(pool, host_state):
    """Reasons of the runtime-contained corpus are specific (not just 'error')."""
    expect = {
        "infinite_loop": "timeout after 1.5s",
        "memory_bomb": "memory limit (256 MB) exceeded",
        "output_bomb_return": "output too large",
        "deep_recursion": "RecursionError",
        "monkeypatch_dspy": "cannot modify ModuleProxy objects",
        "type_of_class": "type() of a class is not available",
    }
    by_stem = {p.stem: p for p in HOSTILE}
    for stem, needle in expect.items():
        prog = compile_program(by_stem[stem].read_text()).program
        with pytest.raises(SpecialistError) as ei:
            pool.run(prog, {"canary": str(host_state)}, FakeBridge())
        assert needle in ei.value.reason, (stem, ei.value.reason)


def test_class_state_does_not_leak(pool, host_state):
    prog = compile_program((HOSTILE_DIR / "class_state_leak.py").read_text()).program
    assert [pool.run(prog, {"canary": "c"}, FakeBridge())["answer"] for _ in range(5)] == [2] * 5
