"""Process lifetime and limits, tested with the static policy AND RestrictedPython bypassed (full
builtins, `pool._run_unchecked`, test-only), so a bug in the policy alone would not be an escape:
scrubbed environment, no state across requests, finalizers charged to their own request, memory and
time limits, the call clock that includes bridge time, recovery after kills, concurrency, per-call
overhead, and nothing left behind."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import dspy
import pytest

from benchmarks.hardening.attacks import SECRET
from dspy_adaptive.sandbox import SandboxPool, SpecialistError, compile_program
from dspy_adaptive.sandbox.testing import FakeBridge, run_unchecked, unchecked

ROOT = os.getuid() == 0
TRIVIAL = compile_program(
    "class S(dspy.Module):\n    def forward(self, x):\n        return dspy.Prediction(answer=x)\n").program


def test_env_is_scrubbed(pool):
    out = run_unchecked(pool, unchecked("return dspy.Prediction(env=dict(os.environ))"), {}).outputs
    assert set(out["env"]) <= {"PATH", "LANG", "LC_CTYPE"}, out["env"]
    assert SECRET not in repr(out) and "OPENAI_API_KEY" not in repr(out)


def test_identity(pool):
    out = run_unchecked(pool, unchecked(
        "return dspy.Prediction(cwd=os.getcwd(), uid=os.getuid(), euid=os.geteuid(), gid=os.getgid(), "
        "groups=os.getgroups())"), {}).outputs
    assert out["cwd"] == "/"                       # no scratch directory: there is nothing to leave behind
    if ROOT:
        assert out["uid"] == out["euid"] == out["gid"] >= 1 << 30 and out["groups"] == []


# ----------------------------------------------------------------------------------------- no state across requests
STATE_SETTERS = {
    "typing.EXCLUDED_ATTRIBUTES": ("import typing\ntyping.EXCLUDED_ATTRIBUTES.add(x)",
                                   "import typing\nreturn dspy.Prediction(seen=sorted(typing.EXCLUDED_ATTRIBUTES))"),
    "decimal.DefaultContext": ("import decimal\ndecimal.DefaultContext.prec = 3",
                               "import decimal\nreturn dspy.Prediction(seen=[str(decimal.DefaultContext.prec)])"),
    "abc registry": ("import collections.abc\ncollections.abc.Sequence.register(int)",
                     "import collections.abc\n"
                     "return dspy.Prediction(seen=[str(issubclass(int, collections.abc.Sequence))])"),
    "overload registry": ("import typing\n@typing.overload\ndef leaked(a: int) -> int: ...\nsys.modules['leak'] = x",
                          "return dspy.Prediction(seen=[str(sys.modules.get('leak'))])"),
    "patched shim": ("dspy.Prediction.leak = x",
                     "return dspy.Prediction(seen=[str(getattr(dspy.Prediction, 'leak', None))])"),
}


@pytest.mark.parametrize("name", sorted(STATE_SETTERS))
def test_no_state_survives_a_request_even_without_the_policy(pool, name):
    setter, reader = STATE_SETTERS[name]
    try:
        run_unchecked(pool, unchecked(setter + "\nreturn dspy.Prediction(ok=1)", args="x"),
                            {"x": "secret-from-request-1"})
    except SpecialistError:
        pass   # whether or not the setter succeeded, the next request must not see it
    out = run_unchecked(pool, unchecked(reader), {}).outputs
    assert "secret-from-request-1" not in repr(out) and out["seen"] not in (["3"], ["True"]), out


def test_slow_finalizer_is_charged_to_the_request_that_made_it(pool):
    spinner = unchecked('''
class Spin:
    def __del__(self):
        while True:
            pass
a = Spin(); a.me = a          # a reference cycle: collected later, not when forward returns
del a
return dspy.Prediction(ok=1)
''')
    with pytest.raises(SpecialistError) as ei:
        run_unchecked(pool, spinner, {})
    assert ei.value.kind == "timeout"
    t0 = time.monotonic()
    assert pool.run(TRIVIAL, {"x": 1}, FakeBridge()) == {"answer": 1}   # the next request is not blamed
    assert time.monotonic() - t0 < 1.0


def test_nothing_a_request_left_behind_calls_the_bridge_later(pool):
    """A generator or a finalizer that would call a predictor after forward returned dies with its process."""
    bridge = FakeBridge()
    src = compile_program('''
class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.p = dspy.Predict("x -> y")

    def forward(self, x):
        later = (self.p(x=str(i)) for i in range(100))
        next(later)
        return dspy.Prediction(answer=x)
''').program
    assert pool.run(src, {"x": 1}, bridge) == {"answer": 1}
    assert len(bridge.calls) == 1
    pool.run(TRIVIAL, {"x": 2}, bridge)
    assert len(bridge.calls) == 1


# ----------------------------------------------------------------------------------------- limits and clocks
def test_memory_limit_without_policy(pool):
    with pytest.raises(SpecialistError) as ei:
        run_unchecked(pool, unchecked("x = bytearray(600 * 1024 * 1024)\nreturn dspy.Prediction(n=len(x))"), {})
    assert ei.value.kind == "memory" and ei.value.reason == "memory limit (256 MB) exceeded"
    assert run_unchecked(pool, unchecked("return dspy.Prediction(ok=1)"), {}).outputs == {"ok": 1}


def test_timeout_without_policy_and_recovery(pool):
    t0 = time.monotonic()
    with pytest.raises(SpecialistError) as ei:
        run_unchecked(pool, unchecked("import time\nwhile True:\n    time.sleep(0.01)"), {})
    assert ei.value.kind == "timeout" and ei.value.reason == "timeout after 1.5s"
    assert time.monotonic() - t0 < 5
    assert run_unchecked(pool, unchecked("return dspy.Prediction(ok=2)"), {}).outputs == {"ok": 2}


def test_killed_mid_call_reports_crash_then_recovers():
    class KillerBridge(FakeBridge):
        def tool(self, request):
            os.kill(pool.worker_pids()[0], signal.SIGKILL)
            time.sleep(0.2)
            return None

    src = compile_program("class S(dspy.Module):\n    def forward(self, x):\n"
                          "        search(q=x)\n        return dspy.Prediction(a=1)\n").program
    with SandboxPool(max_workers=1, timeout=2, tool_names=("search",)) as pool:
        with pytest.raises(SpecialistError) as ei:
            pool.run(src, {"x": 1}, KillerBridge())
        assert ei.value.kind == "crash" and ei.value.reason.startswith("worker crashed (signal 9")
        assert pool.run(TRIVIAL, {"x": 1}, FakeBridge()) == {"answer": 1}
        assert pool.stats["crashes"] == 1


class SlowBridge(FakeBridge):
    def predict(self, request):
        time.sleep(0.4)
        return super().predict(request)


LOOPING_CALLER = compile_program(
    "class S(dspy.Module):\n    def forward(self, x):\n        p = dspy.Predict('x -> y')\n"
    "        for i in range(4):\n            p(x=x)\n        return dspy.Prediction(a=1)\n").program


def test_compute_timeout_excludes_bridge_time_when_the_call_may_take_longer():
    with SandboxPool(max_workers=1, timeout=1.0, call_timeout=5.0) as p:
        assert p.run(LOOPING_CALLER, {"x": 1}, SlowBridge()) == {"a": 1}  # 1.6 s of bridge time, ~0 s compute


def test_by_default_the_whole_call_ends_within_its_timeout():
    """call_timeout defaults to timeout: bridge time counts, and a bridge call still running at the deadline
    does not hold the call (it ends at the deadline; the late answer is dropped)."""
    with SandboxPool(max_workers=1, timeout=1.0) as p:
        assert p.call_timeout == 1.0
        t0 = time.monotonic()
        with pytest.raises(SpecialistError) as ei:
            p.run(LOOPING_CALLER, {"x": 1}, SlowBridge())
        assert ei.value.kind == "timeout" and "bridge time included" in ei.value.reason
        assert time.monotonic() - t0 < 1.3


def test_call_timeout_counts_bridge_time():
    with SandboxPool(max_workers=1, timeout=5.0, call_timeout=1.0) as p:
        t0 = time.monotonic()
        with pytest.raises(SpecialistError) as ei:
            p.run(LOOPING_CALLER, {"x": 1}, SlowBridge())
        assert ei.value.kind == "timeout" and "bridge time included" in ei.value.reason
        assert time.monotonic() - t0 < 2.0
        assert p.run(TRIVIAL, {"x": 1}, FakeBridge()) == {"answer": 1}


def test_concurrency_8_threads_x_10_calls():
    src = compile_program("class S(dspy.Module):\n    def __init__(self):\n        super().__init__()\n"
                          "        self.gen = dspy.Predict('x -> y')\n\n    def forward(self, x):\n"
                          "        return dspy.Prediction(answer=self.gen(x=x).y, x=x)\n").program
    results, errors = {}, []
    with SandboxPool(max_workers=4, timeout=5) as p:
        def worker(t):
            try:
                bridge = FakeBridge()
                with dspy.context(trace=[]):
                    for i in range(10):
                        results[(t, i)] = p.run(src, {"x": f"{t}-{i}"}, bridge)
                    assert [c["inputs"]["x"] for c in bridge.calls] == [f"{t}-{i}" for i in range(10)]
                    assert bridge.contexts == {id(dspy.settings.trace)}   # each thread's own context, every call
            except Exception as e:  # pragma: no cover
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert p.stats["ok"] == 80 and p.stats["workers"] == 0
    assert len(results) == 80
    assert all(r == {"answer": f"y:{t}-{i}", "x": f"{t}-{i}"} for (t, i), r in results.items())


def test_per_call_overhead_median_under_10ms(pool):
    bridge = FakeBridge()
    pool.run(TRIVIAL, {"x": 0}, bridge)
    times = []
    for i in range(100):
        t0 = time.perf_counter()
        pool.run(TRIVIAL, {"x": i}, bridge)
        times.append(time.perf_counter() - t0)
    assert statistics.median(times) < 0.010


# ----------------------------------------------------------------------------------------- nothing left behind
def _own_processes(zygote_pid: int) -> list[int]:
    """Live children of the zygote."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == zygote_pid and stat[0] not in ("Z", "X"):
                out.append(int(d.name))
    return out


def test_no_files_and_no_processes_left_behind(monkeypatch):
    """The pool makes no scratch space at all (workers cannot create files), so a kill cannot leave any:
    checked on this pool alone, not by globbing /tmp (other runs may be using it)."""
    def no_temp(*a, **k):
        raise AssertionError("the sandbox pool created a temporary file or directory")

    monkeypatch.setattr(tempfile, "mkdtemp", no_temp)
    monkeypatch.setattr(tempfile, "mkstemp", no_temp)
    with SandboxPool(max_workers=2, timeout=2) as p:
        for i in range(5):
            p.run(TRIVIAL, {"x": i}, FakeBridge())
        zpid = p._forkserver.pid
        assert os.readlink(f"/proc/{zpid}/cwd") == "/"
        time.sleep(0.1)
        assert set(_own_processes(zpid)) <= set(p.prepared_pids())   # only workers waiting for a request
        assert len(p.prepared_pids()) <= 2
    time.sleep(0.1)
    assert not Path(f"/proc/{zpid}").exists()


def test_workers_and_zygote_die_at_interpreter_exit(tmp_path):
    """A pool that is never closed is cleaned up at exit (weakref.finalize/atexit): no stray processes."""
    script = ("from dspy_adaptive.sandbox import SandboxPool, compile_program\n"
              "p = SandboxPool(max_workers=2, timeout=2)\np.warm()\nprint(p._forkserver.pid)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    zpid = int(out.stdout.strip().split()[-1])
    time.sleep(0.2)
    assert not Path(f"/proc/{zpid}").exists(), out.stderr


def test_each_request_gets_fresh_randomness_addresses_and_hash_key(pool, bridge):
    """Workers are forked from one image: without care every request would put its objects at the same
    addresses, hash text alike (and, with full Python, draw the same random numbers). Each request gets its own."""
    src = compile_program(
        "class S(dspy.Module):\n    def forward(self, x):\n"
        "        objs = [object() for i in range(50)]\n"
        "        return dspy.Prediction(h=hash('some text'), ids=[id(o) for o in objs],\n"
        "                               same=hash('some text') == hash('some ' + 'text'))\n").program
    outs = [pool.run(src, {"x": i}, bridge) for i in range(4)]
    assert len({o["h"] for o in outs}) == 4
    assert len({tuple(o["ids"]) for o in outs}) == 4
    assert all(o["same"] for o in outs)        # equal objects still hash equal within a request
    draws = [run_unchecked(pool, unchecked("import random\nreturn dspy.Prediction(r=random.random())"), {}).outputs["r"]
             for _ in range(4)]
    assert len(set(draws)) == 4
