"""Shared test fixtures. Tests are offline: scripted LMs only, real data read from ../shared/data."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"real benchmark samples expected at {SHARED_DATA} (the shared/ folder beside the repo)")
    return SHARED_DATA


def require_shared_data() -> Path:
    """SHARED_DATA, or skip the calling test with one line saying where the benchmark samples go."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"benchmark samples missing: put them in {SHARED_DATA} (shared/data beside the checkout)")
    return SHARED_DATA
