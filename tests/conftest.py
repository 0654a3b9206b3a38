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


@pytest.fixture(scope="session", autouse=True)
def _benchmark_samples_or_skip():
    """Without ../shared/data, a test that asks the benchmark scripts for the samples (their default directory, or
    ../shared/data named explicitly) skips at that point with the same one line (fails in CI), instead of failing on
    a missing directory."""
    if SHARED_DATA.is_dir() or os.environ.get("DSPY_ADAPTIVE_BENCH_DATA"):
        yield
        return
    try:
        import benchmarks.data as bench_data
    except ImportError:              # an installed package without its benchmarks/ scripts
        yield
        return
    load_family = bench_data.load_family

    def load_family_or_skip(family, source="local", data_dir=None, *args, **kwargs):
        if source == "local" and (data_dir is None or Path(data_dir).resolve() == SHARED_DATA.resolve()):
            require_shared_data()           # the tests pass --data <SHARED_DATA>, or rely on the default
        return load_family(family, source, data_dir, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench_data, "default_data_dir", require_shared_data)
        patch.setattr(bench_data, "load_family", load_family_or_skip)
        yield
