"""The installed package stands alone: it imports, and its command runs, with benchmarks/ nowhere on the
path; and a wheel built from the repository contains dspy_adaptive only (no top-level `benchmarks`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, os, pkgutil, sys
environ = dict(os.environ)
import dspy_adaptive
assert dspy_adaptive.__file__.startswith(sys.argv[1]), dspy_adaptive.__file__
try:
    import benchmarks
except ModuleNotFoundError:
    pass
else:
    raise SystemExit(f"benchmarks is importable from {benchmarks.__path__}")
names = [m.name for m in pkgutil.walk_packages(dspy_adaptive.__path__, "dspy_adaptive.")]
for name in names:
    importlib.import_module(name)
assert not any(m == "benchmarks" or m.startswith("benchmarks.") for m in sys.modules)
assert dict(os.environ) == environ, "importing dspy_adaptive changed the environment"
print(len(names))
"""


def _isolated(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A copy of only the package, a working directory outside the repository, and an environment whose
    path holds that copy and nothing of the repository."""
    site, work = tmp_path / "site", tmp_path / "elsewhere"
    shutil.copytree(REPO / "dspy_adaptive", site / "dspy_adaptive", ignore=shutil.ignore_patterns("__pycache__"))
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(site), LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1")
    return site, work, env


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_every_module_imports_without_benchmarks_on_the_path_and_leaves_the_environment_alone(tmp_path):
    site, work, env = _isolated(tmp_path)
    env.pop("LITELLM_LOCAL_MODEL_COST_MAP")         # so that setting it at import time would show
    out = _run([sys.executable, "-c", PROBE, str(site)], work, env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split()[-1]) > 30            # every module of the package was imported


def test_the_command_runs_without_benchmarks_on_the_path(tmp_path):
    _, work, env = _isolated(tmp_path)
    script = Path(sys.executable).parent / "adaptive-gepa"           # the console script pip installed
    for command in ([str(script)], [sys.executable, "-m", "dspy_adaptive.cli"]):
        out = _run(command + ["demo", "--help"], work, env)
        assert out.returncode == 0 and "--actor-lm" in out.stdout, out.stderr[-3000:]
    # and the demo itself, end to end on scripted LMs
    out = _run([str(script), "demo", "--out", "run", "--actor-lm", "scripted", "--reflection-lm", "scripted",
                "--budget", "40"], work, env)
    assert out.returncode == 0, out.stderr[-3000:]
    run = work / "run"
    assert (run / "report.md").exists() and json.loads((run / "routed.json").read_text())["library"]


def test_a_wheel_of_the_repository_holds_the_library_and_its_data_but_no_benchmarks(tmp_path):
    src = tmp_path / "src"                      # a copy, so the build leaves nothing in the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("dspy_adaptive", "benchmarks"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert "benchmarks" not in top and "dspy_adaptive" in top
    assert {t for t in top if not t.endswith(".dist-info")} == {"dspy_adaptive"}
    for needed in ("dspy_adaptive/demo/data/corpus.jsonl", "dspy_adaptive/demo/data/README.md",
                   "dspy_adaptive/tasks/ifeval/checkers.py", "dspy_adaptive/testing/__init__.py"):
        assert needed in names
