"""Fixtures for the sandbox tests: a secret in the host env, a shared short-timeout pool, a fake bridge."""

from __future__ import annotations

import os

import pytest

from benchmarks.hardening.attacks import SECRET
from dspy_adaptive.sandbox.testing import FakeBridge


@pytest.fixture(scope="module", autouse=True)
def _secret_in_host_env():
    """A fake API key in the host env while sandbox tests spawn workers; it must never reach them."""
    old = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = SECRET
    yield
    if old is None:
        os.environ.pop("OPENAI_API_KEY", None)
    else:
        os.environ["OPENAI_API_KEY"] = old


@pytest.fixture
def bridge() -> FakeBridge:
    return FakeBridge()


@pytest.fixture(scope="session")
def pool():
    from dspy_adaptive.sandbox import SandboxPool

    with SandboxPool(max_workers=2, timeout=1.5, memory_mb=256, max_output_bytes=1_000_000,
                     max_predictor_calls=20, tool_names=("search",)) as p:
        yield p
