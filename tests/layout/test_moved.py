"""Old import paths of moved modules keep working for one release: the same module object, a warning that
names the new path, pickles and string targets (monkeypatch) that name the old path."""

from __future__ import annotations

import pickle
import subprocess
import sys
import warnings

import pytest

from dspy_adaptive import _moved


@pytest.mark.parametrize("old,new", sorted(_moved.MOVED.items()))
def test_an_old_path_gives_the_module_at_its_new_path_with_a_warning(old, new):
    code = ("import importlib, warnings, sys\n"
            "warnings.simplefilter('always')\n"
            "import dspy_adaptive\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            f"    old = importlib.import_module({old!r})\n"
            f"new = importlib.import_module({new!r})\n"
            "assert old is new, (old, new)\n"
            f"assert new.__spec__.name == {new!r}, new.__spec__.name\n"
            f"assert any({new!r} in str(x.message) and x.category is DeprecationWarning for x in w), w\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_submodule_of_a_moved_package_follows_it():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from dspy_adaptive.oeo.runner import Runner
    from dspy_adaptive.optimizers.oeo.runner import Runner as Now
    assert Runner is Now
    assert _moved.new_name("dspy_adaptive.oeo.contract") == "dspy_adaptive.optimizers.oeo.contract"
    assert _moved.new_name("dspy_adaptive.search.engine") is None


def test_a_pickle_naming_an_old_path_loads():
    from dspy_adaptive.program.library import Library
    data = pickle.dumps(Library.empty(2), protocol=0)
    data = data.replace(b"dspy_adaptive.program.library", b"dspy_adaptive.library")
    assert b"dspy_adaptive.library" in data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert pickle.loads(data) == Library.empty(2)
