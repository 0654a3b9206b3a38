"""pytest plugin: run DSPy's own GEPA tests with `dspy.GEPA` or, with only the class swapped, `AdaptiveGEPA`.

Loaded by name (`-p gepa_swap_plugin`) in a subprocess whose working directory is the root of a DSPy
checkout (DSPy's tests open their fixtures relative to it and import `tests.*` from it). Options:

  --gepa-class=dspy|adaptive   which class `dspy.GEPA` names while the tests run (every import path:
                               dspy.GEPA, dspy.teleprompt.GEPA, dspy.teleprompt.gepa.GEPA,
                               dspy.teleprompt.gepa.gepa.GEPA); nothing else about the tests changes.
  --gepa-class-tests-only      keep only the tests that construct the GEPA class (the others test dspy's
                               adapter internals, which swapping the class does not touch).

DSPy's own tests/conftest.py is not loaded (it starts a litellm test server); its `clear_settings` fixture,
which every test relies on, is reproduced here.
"""

from __future__ import annotations

import copy
import inspect

import pytest


def pytest_addoption(parser):
    parser.addoption("--gepa-class", default="dspy", choices=("dspy", "adaptive"))
    parser.addoption("--gepa-class-tests-only", action="store_true", default=False)


def pytest_configure(config):
    config.addinivalue_line("markers", "llm_call: DSPy marker (tests needing a real LM; skipped)")
    config.addinivalue_line("markers", "extra: DSPy marker (skipped)")
    config.addinivalue_line("markers", "deno: DSPy marker (skipped)")
    if config.getoption("--gepa-class") == "adaptive":
        import dspy
        import dspy.teleprompt
        import dspy.teleprompt.gepa
        import dspy.teleprompt.gepa.gepa

        from dspy_adaptive import AdaptiveGEPA

        for module in (dspy, dspy.teleprompt, dspy.teleprompt.gepa, dspy.teleprompt.gepa.gepa):
            module.GEPA = AdaptiveGEPA


def constructs_gepa(item) -> bool:
    fn = getattr(item, "function", None)
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    return "GEPA(" in source


def pytest_collection_modifyitems(config, items):
    for item in items:
        for flag in ("llm_call", "extra", "deno", "reliability"):
            if flag in item.keywords:
                item.add_marker(pytest.mark.skip(reason=f"DSPy's --{flag} tests are not run here"))
    if config.getoption("--gepa-class-tests-only"):
        kept = [i for i in items if constructs_gepa(i)]
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


@pytest.fixture(autouse=True)
def clear_settings():
    """DSPy's tests/conftest.py `clear_settings`: fresh settings and an isolated cache per test."""
    import dspy
    from dspy.dsp.utils.settings import DEFAULT_CONFIG

    original_cache = dspy.cache
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir=None)
    try:
        yield
    finally:
        try:
            dspy.configure(**copy.deepcopy(DEFAULT_CONFIG), inherit_config=False)
        finally:
            dspy.cache = original_cache


@pytest.fixture
def anyio_backend():
    return "asyncio"
