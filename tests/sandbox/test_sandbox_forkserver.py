"""The fork server (zygote): forked workers are confined exactly like workers started from scratch,
the zygote never sees a secret, exit codes travel back through it, and a dead zygote is replaced."""

from __future__ import annotations

import os
import signal
import time

import pytest

from dspy_adaptive.sandbox import SandboxPool, SpecialistError, compile_program
from dspy_adaptive.sandbox import forkserver
from sandbox_helpers import SECRET, FakeBridge

pytestmark = pytest.mark.skipif(not forkserver.available(), reason="fork server needs Linux pidfds")

PROBE = '''import os
import resource
import sys

class Solver(dspy.Module):
    def forward(self):
        env = {}
        for pid in (os.getpid(), os.getppid()):
            try:
                with open("/proc/%d/environ" % pid, "rb") as f:
                    env[str(pid)] = f.read().decode("latin-1")
            except Exception as e:
                env[str(pid)] = "denied: " + type(e).__name__
        limits = {n: list(resource.getrlimit(getattr(resource, n)))
                  for n in ("RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_CORE", "RLIMIT_NOFILE")}
        return dspy.Prediction(env=dict(os.environ), proc_env=env, uid=os.getuid(), gid=os.getgid(),
                               groups=os.getgroups(), cwd=os.getcwd(), files=os.listdir("."),
                               sid_is_own=os.getsid(0) == os.getpid(), limits=limits,
                               fds=sorted(int(x) for x in os.listdir("/proc/self/fd")),
                               no_site=sys.flags.no_site, site_loaded="site" in sys.modules,
                               editable_finder=any("editable" in k for k in sys.modules))
'''
TRIVIAL = compile_program("class S(dspy.Module):\n    def forward(self, x):\n        return dspy.Prediction(answer=x)\n").program


def _probe(method: str) -> dict:
    with SandboxPool(max_workers=1, timeout=5, memory_mb=256, start_method=method) as p:
        assert p.start_method == method
        return p._run_unchecked(PROBE, {}).outputs


def test_forked_worker_is_confined_like_a_spawned_one():
    forked, spawned = _probe("forkserver"), _probe("spawn")
    for out in (forked, spawned):
        assert set(out["env"]) <= {"PATH", "LANG", "LC_CTYPE"} and SECRET not in repr(out)
        assert out["files"] == [] and "dspy-sandbox-" in out["cwd"] and out["sid_is_own"]
        # -S: site-packages' .pth files (e.g. an editable install's import finder) never ran in it
        assert out["no_site"] == 1 and not out["site_loaded"] and not out["editable_finder"]
    same = ("uid", "gid", "groups")
    assert {k: forked[k] for k in same} == {k: spawned[k] for k in same}
    nofile = (forked["limits"].pop("RLIMIT_NOFILE"), spawned["limits"].pop("RLIMIT_NOFILE"))
    assert forked["limits"] == spawned["limits"] and nofile[0] <= nofile[1]   # NOFILE follows the fd numbers
    assert len(forked["fds"]) == len(spawned["fds"])   # stdio, two pipes, and the listing's own fd
    if os.getuid() == 0:
        assert forked["uid"] == 65534 and forked["groups"] == []


def test_zygote_environment_is_scrubbed():
    os.environ["OPENAI_API_KEY"] = SECRET   # also set by the module fixture; explicit here
    with SandboxPool(max_workers=1, timeout=5) as p:
        assert p.run(TRIVIAL, {"x": 1}, FakeBridge()) == {"answer": 1}
        zpid = p._forkserver.pid
        with open(f"/proc/{zpid}/environ", "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if kv)
        assert set(env) <= {b"PATH", b"LANG"} and SECRET.encode() not in b"".join(env.values())
        (wpid,) = p.worker_pids()
        with open(f"/proc/{wpid}/stat") as f:
            assert int(f.read().rsplit(")", 1)[1].split()[1]) == zpid   # the worker is the zygote's child


@pytest.mark.parametrize("body, expected", [
    ("os._exit(7)", "worker exited unexpectedly (exit code 7)"),
    ("os.kill(os.getpid(), signal.SIGSEGV)", "worker crashed (signal 11, SIGSEGV)"),
])
def test_exit_status_travels_back_through_the_zygote(body, expected):
    src = f"import os\nimport signal\n\nclass Solver(dspy.Module):\n    def forward(self):\n        {body}\n"
    with SandboxPool(max_workers=1, timeout=5) as p:
        with pytest.raises(SpecialistError) as ei:
            p._run_unchecked(src, {})
        assert ei.value.kind == "crash" and ei.value.reason == expected
        assert p.run(TRIVIAL, {"x": 2}, FakeBridge()) == {"answer": 2}


def test_dead_zygote_is_replaced_and_running_workers_survive_it():
    with SandboxPool(max_workers=2, timeout=5) as p:
        p.warm()
        old_workers, old_zygote = set(p.worker_pids()), p._forkserver.pid
        os.kill(old_zygote, signal.SIGKILL)
        time.sleep(0.1)
        assert p.run(TRIVIAL, {"x": 3}, FakeBridge()) == {"answer": 3}   # an orphaned worker still serves
        for pid in old_workers:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
        assert p.run(TRIVIAL, {"x": 4}, FakeBridge()) == {"answer": 4}   # respawned through a new zygote
        assert p._forkserver.pid not in (None, old_zygote)
        assert not set(p.worker_pids()) & old_workers


def test_close_stops_the_zygote():
    p = SandboxPool(max_workers=2, timeout=5)
    p.warm()
    zpid, pids = p._forkserver.pid, p.worker_pids()
    p.close()
    for pid in (zpid, *pids):
        assert not os.path.exists(f"/proc/{pid}")


def test_forking_is_much_cheaper_than_spawning():
    def cpu_of_starting(method: str, n: int = 6) -> float:
        before = os.times()
        with SandboxPool(max_workers=n, timeout=5, start_method=method) as p:
            p.warm()
        after = os.times()
        return (after.children_user + after.children_system) - (before.children_user + before.children_system)

    cpu_of_starting("forkserver", 1)            # import caches warm on both sides
    spawn, fork = cpu_of_starting("spawn"), cpu_of_starting("forkserver")
    assert fork < spawn / 2, (fork, spawn)


def test_start_method_is_validated():
    with pytest.raises(ValueError, match="start_method"):
        SandboxPool(start_method="threads")


def _wait_for(cond, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


def test_prestart_starts_the_fork_server_in_the_background_and_forks_no_worker():
    with SandboxPool(max_workers=3, timeout=5) as p:
        p.prestart()
        assert _wait_for(lambda: p._forkserver.pid is not None)
        assert p.stats["spawned"] == 0                                      # workers stay on demand
        zpid = p._forkserver.pid
        assert p.run(TRIVIAL, {"x": 5}, FakeBridge()) == {"answer": 5}
        (wpid,) = p.worker_pids()
        with open(f"/proc/{wpid}/stat") as f:
            assert int(f.read().rsplit(")", 1)[1].split()[1]) == zpid       # forked by the prestarted zygote
        p.prestart()                                                        # running already: no-op
        assert p._forkserver.pid == zpid


def test_prestart_racing_close_leaves_nothing_behind():
    p = SandboxPool(max_workers=4, timeout=5)
    p.prestart()
    time.sleep(0.02)                     # usually mid start-up
    p.close()
    time.sleep(0.3)                      # let the background thread see the closed pool
    assert p.worker_pids() == [] and p._forkserver.pid is None
    p.prestart()                         # a closed pool never starts its fork server again
    time.sleep(0.2)
    assert p._forkserver.pid is None
