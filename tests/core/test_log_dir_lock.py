"""One run per log_dir: a run takes its folder (`search.checkpoint.DirLock`, an flock on log_dir/run.lock held for
the whole run) before it reads, writes or calls anything; a second run into it meanwhile is refused at once,
naming the holder, and changes nothing there. The lock ends with the run: normally, on an exception, on Ctrl-C
(SIGTERM here) -- and when the run is killed outright, since the kernel drops it with the process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import dspy
import pytest
from dspy.utils.exceptions import LMAuthError

from dspy_adaptive import AdaptiveGEPA
from dspy_adaptive.lm.preflight import LMSetupError
from dspy_adaptive.optimizers.terminate import Terminated
from dspy_adaptive.search.checkpoint import (
    LOCK,
    CheckpointStore,
    DirLock,
    LogDirInUseError,
    ResumeMismatchError,
)
from dspy_adaptive.testing import scripted_lm
from tests.core import toy

REPO = Path(__file__).resolve().parents[2]
HOLDER = """
import sys, time
from dspy_adaptive.search.checkpoint import DirLock
lock = DirLock.acquire(sys.argv[1], what="search")
print("locked", flush=True)
time.sleep(600)
"""


@pytest.fixture
def data():
    return toy.make_examples(3), toy.make_examples(3, offset=100)


def optimizer(reflection, log_dir, **kw):
    return AdaptiveGEPA(toy.metric, reflection_lm=reflection, max_metric_calls=40, reflection_minibatch_size=4,
                        seed=3, use_merge=False, progress=False, log_dir=str(log_dir), num_threads=1, **kw)


def compile_into(log_dir, data, reflection=None, **kw):
    train, val = data
    return optimizer(reflection or toy.reflection_lm(), log_dir, **kw).compile(
        dspy.Predict("question -> answer"), trainset=train, valset=val)


def holder(folder) -> subprocess.Popen:
    """Another process holding `folder` as a live run does (it waits until it is killed)."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True, env=env,
                            cwd=REPO)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def free(folder) -> bool:
    """Whether a run could take `folder` now (and give it back at once)."""
    try:
        DirLock.acquire(folder).release()
        return True
    except LogDirInUseError:
        return False


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_second_run_into_a_live_runs_log_dir_is_refused_before_any_lm_call(data, tmp_path):
    run = tmp_path / "run"
    with dspy.context(lm=toy.actor_lm()):
        compile_into(run, data).close()                    # the first run's record: nothing of it may be lost
    proc = holder(run)                                     # ... and that run is alive again (a resume, say)
    try:
        before = snapshot(run)
        actor, reflection = toy.actor_lm(), toy.reflection_lm()
        with dspy.context(lm=actor), pytest.raises(LogDirInUseError) as err:
            compile_into(run, data, reflection, fast_lm=actor, deep_lm=actor)
        assert actor.scripted.calls == [] and reflection.scripted.calls == []     # not one LM call
        assert snapshot(run) == before                                            # nothing changed there
        text = str(err.value)
        assert f"log_dir {str(run)!r} is in use by another search" in text
        assert f"pid {proc.pid} on {socket.gethostname()}" in text and "since " in text
        assert "Wait for that run to end" in text and "use another log_dir" in text
        assert err.value.holder["pid"] == proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_a_log_dir_held_by_a_killed_run_is_free_at_once(data, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    proc = holder(run)
    assert not free(run)
    proc.send_signal(signal.SIGKILL)                      # kill -9: no handler, no cleanup ran
    proc.wait()
    assert json.loads((run / LOCK).read_text())["pid"] == proc.pid    # its note is left behind, and means nothing
    with dspy.context(lm=toy.actor_lm()):
        compile_into(run, data).close()
    assert json.loads((run / "state.json").read_text())["budget"]


def test_the_log_dir_is_free_after_a_normal_end_and_the_rerun_resumes(data, tmp_path):
    run = tmp_path / "run"
    with dspy.context(lm=toy.actor_lm()):
        compile_into(run, data).close()
        assert free(run) and (run / "run.json").exists()
        compile_into(run, data).close()                    # resumes the finished run
    assert free(run)
    assert (run / LOCK).read_text() == ""                  # released: no holder named


def test_the_log_dir_is_free_after_an_exception(data, tmp_path):
    def refuse(call):
        raise LMAuthError("invalid x-api-key", model="anthropic/claude-x")

    actor = scripted_lm(refuse, model="anthropic/claude-x")
    with pytest.raises(LMSetupError):                      # raised mid-run, by the first scored calls
        compile_into(tmp_path / "run", data, fast_lm=actor, deep_lm=actor)
    assert free(tmp_path / "run")

    with dspy.context(lm=toy.actor_lm()):                  # raised while opening: another run's files
        compile_into(tmp_path / "other", data).close()
        with pytest.raises(ResumeMismatchError):
            compile_into(tmp_path / "other", data, max_specialists=2)
    assert free(tmp_path / "other")


def test_the_log_dir_is_free_after_a_strict_sandbox_refusal(data, tmp_path, monkeypatch):
    from dspy_adaptive import SandboxSettings
    from dspy_adaptive.sandbox import IsolationReport, Layers, SandboxIsolationError, SandboxPool

    incomplete = IsolationReport("linux", True, "strict", Layers().to_dict(), {"rlimits": True, "seccomp": False},
                                 missing={"seccomp": "libseccomp unavailable (simulated)"})
    monkeypatch.setattr(SandboxPool, "_measure_isolation", lambda self: incomplete)
    with dspy.context(lm=toy.actor_lm()), pytest.raises(SandboxIsolationError):   # refused after assembly
        compile_into(tmp_path / "run", data, sandbox=SandboxSettings(isolation="strict"))
    assert free(tmp_path / "run")


def test_the_log_dir_is_free_after_ctrl_c(data, tmp_path):
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    inner = toy.reflection_lm()

    def reflect(call):                                     # someone stops the run (SIGTERM stops it as Ctrl-C)
        os.kill(os.getpid(), signal.SIGTERM)
        return inner.scripted.respond(call)

    try:
        with dspy.context(lm=toy.actor_lm()), pytest.raises(Terminated):
            compile_into(tmp_path / "run", data, scripted_lm(reflect, model="scripted/reflection"))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert free(tmp_path / "run")


def test_two_stores_of_one_process_exclude_each_other(tmp_path):
    first = CheckpointStore(tmp_path, {"a": 1}, what="search")
    first.open()
    with pytest.raises(LogDirInUseError, match=r"\(this process\)"):
        CheckpointStore(tmp_path, {"a": 1}, what="search").open()
    first.close()                                          # the eval log closed: the record is still to be written
    assert not free(tmp_path)
    first.release()
    assert free(tmp_path)
    again = CheckpointStore(tmp_path, {"a": 1}, what="search")
    assert again.open().resumed is False                   # taken again: the same (empty) run
    again.release()


def test_without_fcntl_the_lock_is_a_no_op(tmp_path, monkeypatch):
    from dspy_adaptive.search import checkpoint

    monkeypatch.setattr(checkpoint, "fcntl", None)         # Windows
    with DirLock.acquire(tmp_path) as a, DirLock.acquire(tmp_path) as b:
        assert not a.held and not b.held
