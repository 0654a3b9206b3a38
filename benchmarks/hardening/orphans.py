"""Workers never outlive their host (issue 25, class 1: a worker survived SIGKILL of its host, reparented to
init).

A host process (a child of this one, `python -c HOST`) starts a pool and puts its workers in every state
an attacker can choose -- sleeping without using CPU, spinning, waiting on a bridge call, blocking every
signal, trying to disarm its own timer, and prepared but never used -- then, once every call's specialist
says it is running (a `started()` tool call: a worker that dies before its request reaches it is replaced,
and the call runs on a fresh one, so "taken" is not "running"), something happens to it:

    host SIGKILLed                every worker and the zygote must be gone within GRACE seconds
                                  (the zygote watches the host; the workers die with the zygote)
    zygote SIGKILLed              every worker must be gone within GRACE (parent-death signal), and the
                                  host's calls end as crashes, not hangs
    host stopped (SIGSTOP)        no one kills anything on the host's behalf: each worker must die at its
                                  own wall-clock limit (the zygote enforces it)
    host and zygote stopped       only the workers' own timers are left (a POSIX timer sending SIGKILL at
                                  their lifetime: no signal mask stops it; seccomp refuses timer_delete)

each with every OS layer on and with all of them off (the first three do not rest on any OS layer; the
last does on seccomp -- a worker with full Python and no seccomp can delete its own timer -- so it runs
with the layers on). An attack is `contained` when nothing survived, else `escaped` (a process outliving
its host or its limit).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from benchmarks.hardening.rows import FamilyRow, Outcome

GRACE = 3.0
LIFETIME_SLACK = 3.0
REPO = Path(__file__).resolve().parents[2]

STATES = {
    "sleeping (no CPU)": "import time\ntime.sleep(10**6)",
    "spinning": "while True:\n    pass",
    "waiting on a bridge call": "slow()\nimport time\ntime.sleep(10**6)",
    "blocks every signal, ignores SIGALRM, sleeps": (
        "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, range(1, 32))\ntime.sleep(10**6)"),
    "tries to disarm its own timer, sleeps": (
        "import ctypes, time\nlibc = ctypes.CDLL(None)\nfor t in range(8):\n"
        "    libc.timer_delete(ctypes.c_void_p(t))\ntime.sleep(10**6)"),
}

HOST = r'''
import json, sys, threading, time, warnings
cfg = json.loads(sys.argv[1])
from dspy_adaptive.sandbox import Layers, SandboxPool
from dspy_adaptive.sandbox.testing import FakeBridge, run_unchecked, unchecked
warnings.simplefilter("ignore")

started = []

class Bridge(FakeBridge):
    def tool(self, request):
        if request.name == "started":     # the call's specialist code is running (its request reached it)
            started.append(1)
            return None
        time.sleep(10**6)

layers = Layers() if cfg["layers"] else Layers.none()
pool = SandboxPool(max_workers=len(cfg["states"]), timeout=cfg["timeout"], call_timeout=cfg["call_timeout"],
                   max_idle=cfg["max_idle"], layers=layers, tool_names=("slow", "started"), prepared=2)
pool.warm()
errors = []
def call(body):
    try:
        run_unchecked(pool, unchecked("started()\n" + body), {}, Bridge())
    except Exception as e:
        errors.append(type(e).__name__ + ": " + str(e)[:200])
for body in cfg["states"]:
    threading.Thread(target=call, args=(body,), daemon=True).start()
end = time.monotonic() + 30
while time.monotonic() < end and (len(started) < len(cfg["states"]) or len(pool.prepared_pids()) < 2):
    time.sleep(0.02)
print(json.dumps({"zygote": pool._forkserver.pid, "workers": pool.worker_pids(), "prepared": pool.prepared_pids(),
                  "errors": errors}), flush=True)
time.sleep(cfg["hold"])
print(json.dumps({"errors": errors}), flush=True)
time.sleep(10**6)
'''



def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if stat[0] in ("Z", "X") else stat[19]


def _alive(pids: dict[int, str]) -> list[int]:
    return [pid for pid, started in pids.items() if _start_time(pid) == started]


def _wait_gone(pids: dict[int, str], seconds: float) -> list[int]:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        left = _alive(pids)
        if not left:
            return []
        time.sleep(0.05)
    return _alive(pids)


@dataclass
class Host:
    proc: subprocess.Popen
    zygote: int
    workers: dict[int, str]
    prepared: dict[int, str]
    errors: list[str]

    def kill_all(self) -> None:
        """Clean up whatever this scenario started and left (by pid, checked against its start time)."""
        for pid in [self.proc.pid, self.zygote, *self.workers, *self.prepared]:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        for pid in _alive({**self.workers, **self.prepared, self.zygote: _start_time(self.zygote) or ""}):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.kill()
        self.proc.wait(timeout=10)


def start_host(layers: bool, timeout: float = 600.0, call_timeout: float = 600.0, max_idle: float = 60.0,
               hold: float = 600.0) -> Host:
    cfg = {"layers": layers, "states": list(STATES.values()), "timeout": timeout, "call_timeout": call_timeout,
           "max_idle": max_idle, "hold": hold}
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", HOST, json.dumps(cfg)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env, cwd=str(REPO))
    line = proc.stdout.readline()
    info = json.loads(line)
    pids = {pid: _start_time(pid) for pid in info["workers"]}
    prepared = {pid: _start_time(pid) for pid in info["prepared"]}
    return Host(proc, int(info["zygote"]), {p: s for p, s in pids.items() if s},
                {p: s for p, s in prepared.items() if s}, list(info.get("errors") or []))


def _scenario(name: str, layers: bool, act, wait: float, check=None, **host_kw) -> Outcome:
    try:
        host = start_host(layers, **host_kw)
    except Exception as e:  # noqa: BLE001
        return Outcome(name, "host-broken", detail=f"the host did not start its workers ({type(e).__name__}: {e})")
    try:
        if len(host.workers) < len(STATES) or not host.prepared:
            return Outcome(name, "host-broken", detail=f"only {len(host.workers)} workers / "
                           f"{len(host.prepared)} prepared ({host.errors[:2]})")
        watched = {**host.workers, **host.prepared}
        t0 = time.monotonic()
        act(host)
        left = _wait_gone(watched, wait)
        took = time.monotonic() - t0
        if left:
            return Outcome(name, "escaped", detail=f"{len(left)} of {len(watched)} workers alive {wait:.0f}s later")
        problem = check(host) if check else ""
        if problem:
            return Outcome(name, "host-broken", detail=problem)
        return Outcome(name, "contained", detail=f"all {len(watched)} gone in {took:.2f}s")
    finally:
        host.kill_all()


def _kill_host(host: Host) -> None:
    os.kill(host.proc.pid, signal.SIGKILL)


def _kill_zygote(host: Host) -> None:
    os.kill(host.zygote, signal.SIGKILL)


def _calls_ended_as_crashes(host: Host) -> str:
    """After its zygote died, the host's calls must all have ended (as SpecialistErrors), not hung."""
    line = host.proc.stdout.readline()      # the host reports its calls' errors `hold` seconds after starting
    errors = json.loads(line).get("errors", []) if line else []
    if len(errors) != len(STATES) or not all(e.startswith("SpecialistError") for e in errors):
        return f"the host's calls did not all end as crashes: {errors}"
    return ""


def _stop_host(host: Host) -> None:
    os.kill(host.proc.pid, signal.SIGSTOP)


def _stop_host_and_zygote(host: Host) -> None:
    os.kill(host.zygote, signal.SIGSTOP)
    os.kill(host.proc.pid, signal.SIGSTOP)


def orphan_rows() -> list[FamilyRow]:
    short = dict(timeout=2.0, call_timeout=2.0, max_idle=1.0)   # a worker's own limit: 1 + 2 + 1 = 4 s
    plans: list[tuple[bool, tuple]] = []
    for layers in (True, False):
        plans += [(layers, ("host SIGKILLed", layers, _kill_host, GRACE)),
                  (layers, ("zygote SIGKILLed", layers, _kill_zygote, GRACE, _calls_ended_as_crashes)),
                  (layers, ("host stopped", layers, _stop_host, 4.0 + LIFETIME_SLACK, None, short))]
        if layers:
            plans.append((layers, ("host and zygote stopped", layers, _stop_host_and_zygote, 4.0 + LIFETIME_SLACK,
                                   None, short)))

    def run(plan: tuple) -> Outcome:
        name, layers, act, wait, *rest = plan
        check = rest[0] if rest else None
        kw = dict(rest[1]) if len(rest) > 1 else {}
        kw.setdefault("hold", 3.0 if check else 600.0)
        return _scenario(name, layers, act, wait, check, **kw)

    with ThreadPoolExecutor(max_workers=4) as ex:     # the scenarios are independent hosts
        outcomes = list(ex.map(run, [p for _, p in plans]))
    rows = {True: FamilyRow("orphaned workers (all OS layers)"),
            False: FamilyRow("orphaned workers (every OS layer off)")}
    for (layers, _), outcome in zip(plans, outcomes):
        rows[layers].outcomes.append(outcome)
    return [rows[True], rows[False]]
