"""Shared test fixtures. Tests are offline: scripted LMs only, real data read from ../shared/data."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


#: CI sets this (.ci/run): there a missing sample is a failure, not a skip.
REQUIRED = os.environ.get("DSPY_ADAPTIVE_REQUIRE_SHARED_DATA") == "1"


def require_shared_data() -> Path:
    """SHARED_DATA, or skip the calling test with one line saying where the benchmark samples go (fail in CI)."""
    if not SHARED_DATA.is_dir():
        message = f"benchmark samples missing: put them in {SHARED_DATA} (shared/data beside the checkout)"
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    return SHARED_DATA


@pytest.fixture
def shared_data() -> Path:
    return require_shared_data()
