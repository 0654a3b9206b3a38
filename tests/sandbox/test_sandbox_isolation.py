"""OS-level layers tested directly with the policy AND RestrictedPython bypassed (full builtins,
`pool._run_unchecked`, test-only), so a bug in the policy alone would not be an escape. Also:
recovery after kills/timeouts, concurrency, and per-call overhead."""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from pathlib import Path

import pytest

from dspy_adaptive.sandbox import SandboxPool, SpecialistError, compile_program
from sandbox_helpers import SECRET, FakeBridge

ROOT = os.getuid() == 0


def raw(body: str) -> str:
    lines = "\n".join("        " + line for line in body.strip("\n").splitlines())
    return f"import os\n\nclass Solver(dspy.Module):\n    def forward(self, canary=''):\n{lines}\n"


def test_env_is_scrubbed(pool):
    src = raw('''
out = {"env": dict(os.environ)}
for p in ["/proc/self/environ", "/proc/%d/environ" % os.getppid(), "/proc/1/environ"]:
    try:
        with open(p, "rb") as f:
            out[p] = f.read().decode("latin-1")
    except Exception as e:
        out[p] = "denied: " + type(e).__name__
return dspy.Prediction(**out)
''')
    out = pool._run_unchecked(src, {}).outputs
    assert set(out["env"]) <= {"PATH", "LANG", "LC_CTYPE"}, out["env"]
    assert SECRET not in repr(out)
    assert "OPENAI_API_KEY" not in repr(out)


def test_cwd_is_fresh_scratch_and_identity(pool):
    src = raw('''
return dspy.Prediction(cwd=os.getcwd(), files=os.listdir("."), uid=os.getuid(), gid=os.getgid(),
                       groups=os.getgroups(), euid=os.geteuid())
''')
    out = pool._run_unchecked(src, {}).outputs
    assert "dspy-sandbox-" in out["cwd"] and out["cwd"] != os.getcwd() and out["files"] == []
    if ROOT:
        assert (out["uid"], out["euid"], out["gid"], out["groups"]) == (65534, 65534, 65534, [])


def test_cannot_write_host_files_or_fork(pool, tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("original")
    host_cwd = Path.cwd()
    before = set(os.listdir(host_cwd))
    src = raw('''
res = {}
for name, path in [("canary", canary), ("host_cwd", HOST_CWD + "/pwned.txt"), ("tmp", "/tmp/pwned-sbx"),
                   ("scratch", "scratch.txt")]:
    try:
        with open(path, "w") as f:
            f.write("pwned" * 100)
            f.flush()
        res[name] = "written"
    except Exception as e:
        res[name] = "denied: " + type(e).__name__
try:
    os.listdir("/root")
    res["root_dir"] = "listed"
except Exception as e:
    res["root_dir"] = "denied: " + type(e).__name__
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    res["fork"] = "forked"
except Exception as e:
    res["fork"] = "denied: " + type(e).__name__
try:
    setuid_ok = os.setuid(0) or "became root"
except Exception as e:
    setuid_ok = "denied: " + type(e).__name__
res["setuid"] = setuid_ok
return dspy.Prediction(**res)
'''.replace("HOST_CWD", repr(str(host_cwd))))
    out = pool._run_unchecked(src, {"canary": str(canary)}).outputs
    assert canary.read_text() == "original"
    assert set(os.listdir(host_cwd)) == before
    assert out["scratch"].startswith("denied")  # RLIMIT_FSIZE=0 (EFBIG), SIGXFSZ ignored
    assert out["fork"].startswith("denied")     # RLIMIT_NPROC=0
    if ROOT:
        assert out["canary"].startswith("denied") and out["host_cwd"].startswith("denied")
        assert out["root_dir"].startswith("denied") and out["setuid"].startswith("denied")
    Path("/tmp/pwned-sbx").unlink(missing_ok=True)  # may exist as an empty file (FSIZE=0), never with content


def test_memory_limit_without_policy(pool):
    with pytest.raises(SpecialistError) as ei:
        pool._run_unchecked(raw("x = bytearray(600 * 1024 * 1024)\nreturn dspy.Prediction(n=len(x))"), {})
    assert ei.value.kind == "memory" and ei.value.reason == "memory limit (256 MB) exceeded"
    assert pool._run_unchecked(raw("return dspy.Prediction(ok=1)"), {}).outputs == {"ok": 1}


def test_timeout_without_policy_and_recovery(pool):
    t0 = time.monotonic()
    with pytest.raises(SpecialistError) as ei:
        pool._run_unchecked(raw("import time\nwhile True:\n    time.sleep(0.01)"), {})
    assert ei.value.kind == "timeout" and ei.value.reason == "timeout after 1.5s"
    assert time.monotonic() - t0 < 5
    assert pool._run_unchecked(raw("return dspy.Prediction(ok=2)"), {}).outputs == {"ok": 2}


TRIVIAL = compile_program("class S(dspy.Module):\n    def forward(self, x):\n        return dspy.Prediction(answer=x)\n").program


def test_recovers_after_worker_sigkilled():
    with SandboxPool(max_workers=2, timeout=2) as p:
        p.warm()
        pids = p.worker_pids()
        assert len(pids) == 2
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
        assert p.run(TRIVIAL, {"x": 5}, FakeBridge()) == {"answer": 5}
        assert not set(p.worker_pids()) & set(pids)


def test_killed_mid_call_reports_crash_then_recovers():
    class KillerBridge(FakeBridge):
        def tool(self, *, name, kwargs):
            os.kill(kwargs["pid"], signal.SIGKILL)
            time.sleep(0.2)
            return None

    src = compile_program("class S(dspy.Module):\n    def forward(self, pid):\n"
                          "        search(pid=pid)\n        return dspy.Prediction(a=1)\n").program
    with SandboxPool(max_workers=1, timeout=2, tool_names=("search",)) as p:
        p.warm()
        (pid,) = p.worker_pids()
        with pytest.raises(SpecialistError) as ei:
            p.run(src, {"pid": pid}, KillerBridge())
        assert ei.value.kind == "crash" and ei.value.reason.startswith("worker crashed (signal 9")
        assert p.run(TRIVIAL, {"x": 1}, FakeBridge()) == {"answer": 1}
        assert p.stats["crashes"] == 1 and p.stats["respawns"] == 1


def test_timeout_excludes_bridge_time():
    class SlowBridge(FakeBridge):
        def predict(self, **kw):
            time.sleep(0.4)
            return super().predict(**kw)

    src = compile_program("class S(dspy.Module):\n    def forward(self, x):\n        p = dspy.Predict('x -> y')\n"
                          "        for i in range(4):\n            p(x=x)\n        return dspy.Prediction(a=1)\n").program
    with SandboxPool(max_workers=1, timeout=1.0) as p:
        assert p.run(src, {"x": 1}, SlowBridge()) == {"a": 1}  # 1.6 s of bridge time, ~0 s compute


def test_concurrency_8_threads_x_10_calls():
    src = compile_program("class S(dspy.Module):\n    def __init__(self):\n        super().__init__()\n"
                          "        self.gen = dspy.Predict('x -> y')\n\n    def forward(self, x):\n"
                          "        return dspy.Prediction(answer=self.gen(x=x).y, x=x)\n").program
    results, errors = {}, []
    with SandboxPool(max_workers=4, timeout=5) as p:
        def worker(t):
            try:
                bridge = FakeBridge()
                for i in range(10):
                    results[(t, i)] = p.run(src, {"x": f"{t}-{i}"}, bridge)
                assert bridge.threads == {threading.get_ident()}
                assert len(bridge.calls) == 10
            except Exception as e:  # pragma: no cover
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert p.stats["spawned"] <= 4 and p.stats["ok"] == 80
    assert len(results) == 80
    assert all(r == {"answer": f"y:{t}-{i}", "x": f"{t}-{i}"} for (t, i), r in results.items())


def test_close_reaps_workers():
    p = SandboxPool(max_workers=2, timeout=2)
    p.warm()
    pids = p.worker_pids()
    p.close()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), "worker left running or as a zombie"


def test_per_call_overhead_median_under_10ms(pool):
    bridge = FakeBridge()
    pool.run(TRIVIAL, {"x": 0}, bridge)
    times = []
    for i in range(200):
        t0 = time.perf_counter()
        pool.run(TRIVIAL, {"x": i}, bridge)
        times.append(time.perf_counter() - t0)
    assert statistics.median(times) < 0.010


def test_workers_die_at_interpreter_exit(tmp_path):
    """A pool that is never closed is cleaned up at exit (weakref.finalize/atexit): no stray workers."""
    import subprocess
    import sys

    script = ("from dspy_adaptive.sandbox import SandboxPool\n"
              "p = SandboxPool(max_workers=2, timeout=2)\np.warm()\nprint(' '.join(map(str, p.worker_pids())))\n")
    scratch_before = set(Path(tempfile_dir()).glob("dspy-sandbox-*"))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    pids = [int(x) for x in out.stdout.split()]
    assert len(pids) == 2, out.stderr
    time.sleep(0.2)
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
        assert not Path(f"/proc/{pid}").exists()
    assert set(Path(tempfile_dir()).glob("dspy-sandbox-*")) <= scratch_before  # scratch dirs removed too


def tempfile_dir() -> str:
    import tempfile

    return tempfile.gettempdir()
