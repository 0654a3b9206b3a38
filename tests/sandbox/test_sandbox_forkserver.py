"""The fork server (zygote): every request gets a fresh worker forked from it, confined exactly like a
worker started from scratch; the zygote never sees a secret, sits in an empty network namespace on
root hosts, passes exit codes back, and a dead zygote is replaced."""

from __future__ import annotations

import os
import signal
import time

import pytest

from benchmarks.hardening.attacks import SECRET
from dspy_adaptive.sandbox import SandboxPool, SpecialistError, compile_program, forkserver
from dspy_adaptive.sandbox.testing import FakeBridge, run_unchecked, unchecked

pytestmark = pytest.mark.skipif(not forkserver.available(), reason="fork server needs Linux pidfds")

PROBE = unchecked('''
import resource
limits = {n: list(resource.getrlimit(getattr(resource, n)))
          for n in ("RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_CORE", "RLIMIT_NOFILE")}
try:
    os.listdir("/proc/self/fd")
    fds = "listed"
except OSError as e:
    fds = "denied"
return dspy.Prediction(env=dict(os.environ), uid=os.getuid(), gid=os.getgid(), groups=os.getgroups(),
                       cwd=os.getcwd(), sid_is_own=os.getsid(0) == os.getpid(), limits=limits, fds=fds,
                       pid=os.getpid(), no_site=sys.flags.no_site, site_loaded="site" in sys.modules,
                       editable_finder=any("editable" in k for k in sys.modules))
''')
TRIVIAL = compile_program(
    "class S(dspy.Module):\n    def forward(self, x):\n        return dspy.Prediction(answer=x)\n").program


def _probe(method: str) -> dict:
    with SandboxPool(max_workers=1, timeout=5, memory_mb=256, start_method=method) as p:
        assert p.start_method == method
        return run_unchecked(p, PROBE, {}).outputs


def test_forked_worker_is_confined_like_a_spawned_one():
    forked, spawned = _probe("forkserver"), _probe("spawn")
    for out in (forked, spawned):
        assert set(out["env"]) <= {"PATH", "LANG", "LC_CTYPE"} and SECRET not in repr(out)
        assert out["cwd"] == "/" and out["sid_is_own"] and out["fds"] == "denied"
        # -S: site-packages' .pth files (e.g. an editable install's import finder) never ran in it
        assert out["no_site"] == 1 and not out["site_loaded"] and not out["editable_finder"]
        if os.getuid() == 0:     # a uid of its own, no groups, nobody's files
            assert out["uid"] == out["gid"] and out["uid"] >= 1 << 30 and out["groups"] == []
    nofile = (forked["limits"].pop("RLIMIT_NOFILE"), spawned["limits"].pop("RLIMIT_NOFILE"))
    assert forked["limits"] == spawned["limits"] and nofile[0] <= nofile[1]   # NOFILE follows the fd numbers


def test_every_request_gets_a_new_process_with_its_own_uid():
    with SandboxPool(max_workers=2, timeout=5) as p:
        outs = [run_unchecked(p, PROBE, {}).outputs for _ in range(4)]
        assert len({o["pid"] for o in outs}) == 4
        if os.getuid() == 0:
            assert len({o["uid"] for o in outs}) == 4
        assert p.worker_pids() == []                       # nothing lingers between requests
        for o in outs:
            assert _gone(o["pid"])


def _gone(pid: int, timeout: float = 2.0) -> bool:
    """The process has exited (gone, or a zombie waiting for the zygote to reap it)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.01)
    return False


def test_zygote_environment_is_scrubbed_and_its_network_is_empty():
    os.environ["OPENAI_API_KEY"] = SECRET   # also set by the module fixture; explicit here
    with SandboxPool(max_workers=1, timeout=5) as p:
        assert p.run(TRIVIAL, {"x": 1}, FakeBridge()) == {"answer": 1}
        zpid = p._forkserver.pid
        with open(f"/proc/{zpid}/environ", "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if kv)
        assert set(env) <= {b"PATH", b"LANG"} and SECRET.encode() not in b"".join(env.values())
        if os.getuid() == 0:
            assert os.readlink(f"/proc/{zpid}/ns/net") != os.readlink("/proc/self/ns/net")
            assert p.isolation_report().applied == {"rlimits": True, "uid": True, "landlock": True,
                                                    "seccomp": True} or not p.isolation_report().complete


@pytest.mark.parametrize("body, expected", [
    ("os._exit(7)", "worker exited unexpectedly (exit code 7)"),
    ("import ctypes\nctypes.string_at(0)", "worker crashed (signal 11, SIGSEGV)"),
])
def test_exit_status_travels_back_through_the_zygote(body, expected):
    with SandboxPool(max_workers=1, timeout=5) as p:
        with pytest.raises(SpecialistError) as ei:
            run_unchecked(p, unchecked(body), {})
        assert ei.value.kind == "crash" and ei.value.reason == expected
        assert p.run(TRIVIAL, {"x": 2}, FakeBridge()) == {"answer": 2}


def test_dead_zygote_is_replaced():
    with SandboxPool(max_workers=2, timeout=5) as p:
        p.warm()
        old_zygote = p._forkserver.pid
        os.kill(old_zygote, signal.SIGKILL)
        time.sleep(0.1)
        assert p.run(TRIVIAL, {"x": 4}, FakeBridge()) == {"answer": 4}   # through a new zygote
        assert p._forkserver.pid not in (None, old_zygote)


def test_close_stops_the_zygote():
    p = SandboxPool(max_workers=2, timeout=5)
    p.run(TRIVIAL, {"x": 1}, FakeBridge())
    zpid = p._forkserver.pid
    p.close()
    time.sleep(0.1)
    assert not os.path.exists(f"/proc/{zpid}")


def test_forking_is_much_cheaper_than_spawning():
    def cpu_of_calls(method: str, n: int = 6) -> float:
        before = os.times()
        with SandboxPool(max_workers=2, timeout=5, start_method=method) as p:
            for i in range(n):
                p.run(TRIVIAL, {"x": i}, FakeBridge())
        after = os.times()
        return (after.children_user + after.children_system) - (before.children_user + before.children_system)

    cpu_of_calls("forkserver", 1)            # import caches warm on both sides
    spawn, fork = cpu_of_calls("spawn"), cpu_of_calls("forkserver")
    assert fork < spawn / 2, (fork, spawn)


def test_start_method_and_isolation_are_validated():
    with pytest.raises(ValueError, match="start_method"):
        SandboxPool(start_method="threads")
    with pytest.raises(ValueError, match="isolation"):
        SandboxPool(isolation="paranoid")


def _wait_for(cond, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


def test_prestart_starts_the_fork_server_and_prepares_workers_in_the_background():
    with SandboxPool(max_workers=3, timeout=5) as p:
        p.prestart()
        assert _wait_for(lambda: p._report is not None and p.stats["prepared"] == 3)
        assert p.stats["workers"] == 0                      # none serves a request: they wait, confined, for one
        assert p.stats["spawned"] <= 1 + 3                  # the isolation check's one worker, and the prepared ones
        zpid = p._forkserver.pid
        assert p.run(TRIVIAL, {"x": 5}, FakeBridge()) == {"answer": 5}
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


def test_a_worker_crash_retires_its_zygote_for_a_fresh_layout():
    """A crash may be an attacker probing the address space (every worker of one zygote shares its layout and
    string-hash key): the next workers come from a new zygote, and the old one exits once its workers have."""
    with SandboxPool(max_workers=1, timeout=5) as p:
        assert p.run(TRIVIAL, {"x": 1}, FakeBridge()) == {"answer": 1}
        old = p._forkserver.pid
        with pytest.raises(SpecialistError, match="SIGSEGV"):
            run_unchecked(p, unchecked("import ctypes\nctypes.string_at(0)"), {})
        probe = unchecked("return dspy.Prediction(h=hash('layout'))")
        assert run_unchecked(p, probe, {}).outputs and p._forkserver.pid not in (None, old)
        assert _wait_for(lambda: not os.path.exists(f"/proc/{old}") or _gone(old))


def _children_of(pid: int) -> set[int]:
    kids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
                if int(ppid) == pid and state != "Z":      # (an exited worker waits for the zygote's next reap)
                    kids.add(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def test_the_empty_worker_floor_forks_confined_workers_and_leaves_none_behind():
    """sandbox.bench's floor (a worker forked, confined, then sent away unused) measures real workers -- the
    zygote makes each one -- and none of them outlives the measurement or serves anything."""
    from dspy_adaptive.sandbox.bench import empty_worker_cpu_ms

    with SandboxPool(max_workers=1, timeout=5) as p:
        assert p.run(TRIVIAL, {"x": 1}, FakeBridge()) == {"answer": 1}
        spawned = p.stats["spawned"]
        ms = empty_worker_cpu_ms(p, 30)       # (CPU is counted in 10 ms ticks: enough workers to show)
        assert 0 < ms < 1000
        assert spawned + 30 <= p.stats["spawned"] <= spawned + 30 + 2    # (+ what the refill may have prepared)
        zpid = p._forkserver.pid
        assert _wait_for(lambda: _children_of(zpid) <= set(p.prepared_pids()))
        assert p.stats["workers"] == 0
        assert p.run(TRIVIAL, {"x": 2}, FakeBridge()) == {"answer": 2}     # the pool serves on as before


def test_workers_are_asked_of_the_zygote_a_batch_at_a_time():
    """The supply asks the zygote for `batch` workers per round trip (the round trip is a quarter of a
    worker's CPU): when none is prepared a call takes one of a fresh batch and leaves the rest prepared, and
    the refill waits until a batch has been taken."""
    sizes: list[int] = []
    with SandboxPool(max_workers=8, timeout=5) as p:
        supply = p._supply
        assert (supply.target, supply.batch) == (8, 4)
        p.warm()
        assert _wait_for(lambda: supply.prepared() == 8)
        real = p._forkserver.spawn
        p._forkserver.spawn = lambda n, cfg: (sizes.append(n), real(n, cfg))[1]
        for i in range(20):
            assert p.run(TRIVIAL, {"x": i}, FakeBridge()) == {"answer": i}
        supply.flush()                                     # none prepared: the next call starts a batch itself
        assert p.run(TRIVIAL, {"x": 99}, FakeBridge()) == {"answer": 99}
        assert _wait_for(lambda: supply.prepared() >= 3)
        assert sizes and all(n >= 4 for n in sizes), sizes    # never one worker per zygote round trip
        assert supply.prepared() <= supply.target + supply.batch - 1
    with SandboxPool(max_workers=1, timeout=5) as p:          # a target of 2 refills one at a time
        assert (p._supply.target, p._supply.batch) == (2, 1)
