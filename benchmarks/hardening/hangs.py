"""Attacks on the host's time: hangs and protocol violations (issue 25, class 1).

Each attack is a specialist that tries to make a call never return -- by leaving replies unread, by not
reading what the host sends, by stalling mid-frame, by sending frames that break the protocol, or by
making the host's own bridge work slow -- and each is run with a deadline. An attack is

    contained    the call ended (a SpecialistError) within its deadline + SLACK, its worker is gone, and
                 the pool still serves an honest request at once
    host-hung    the call was still running at deadline + SLACK (the run waits at most HARD_STOP for it)
    host-broken  the host raised something else, or the pool no longer serves

Two families: `policy on` (restricted specialists that pass the static policy and use only the bridge;
all OS layers on) and `raw frames` (full Python writing bytes at the host: no policy, no RestrictedPython,
no OS layer), plus a concurrency row (two hanging calls hold every slot while an honest request waits).
"""

from __future__ import annotations

import threading
import time
import warnings
from typing import Any, Callable

from benchmarks.hardening.rows import FamilyRow, Outcome
from dspy_adaptive.sandbox import Layers, SandboxPool, SpecialistError, compile_program
from dspy_adaptive.sandbox.testing import FakeBridge, run_unchecked, unchecked

TIMEOUT = 1.0          # the pools' deadline here (timeout = call_timeout)
SLACK = 0.5            # what "within its deadline" allows for killing the worker and returning
HARD_STOP = 15.0       # how long a run waits for a hung call before giving up on it
HONEST = compile_program(
    "class S(dspy.Module):\n    def forward(self, x):\n        return dspy.Prediction(answer=x)\n").program

# ------------------------------------------------------------------------------------------ raw frames
_FIND = '''
import json, struct, time
f = sys._getframe()
while f is not None and "out_fd" not in f.f_locals:
    f = f.f_back
fd = f.f_locals["out_fd"]
def frame(msg):
    data = json.dumps(msg).encode()
    return struct.pack(">I", len(data)) + data
PRED = {"op": "predict", "name": "p", "kind": "Predict", "signature": "q -> a", "inputs": {"q": "x"}}
'''

RAW_ATTACKS: dict[str, tuple[str, str]] = {   # name -> (what the worker does, how the bridge answers)
    # the deadlock: requests keep coming, replies are never read
    "requests without reading (small) replies": ("while True:\n    os.write(fd, frame(PRED))", "small"),
    "requests without reading (large) replies": ("while True:\n    os.write(fd, frame(PRED))", "big"),
    # one request, then the (large) reply is never read: the host's write must not block
    "never reads a large reply": ("os.write(fd, frame(PRED))\ntime.sleep(10**6)", "big"),
    "stalls mid-frame": ("os.write(fd, struct.pack('>I', 4096) + b'{')\ntime.sleep(10**6)", "small"),
    "header claims 2 GB": ("os.write(fd, struct.pack('>I', 2**31))\ntime.sleep(10**6)", "small"),
    "frame is not JSON": ("os.write(fd, struct.pack('>I', 9) + b'{not json')\ntime.sleep(10**6)", "small"),
    "frame is not an object": ("os.write(fd, struct.pack('>I', 5) + b'[1,2]')\ntime.sleep(10**6)", "small"),
    "unknown op": ("os.write(fd, frame({'op': 'shell', 'cmd': 'id'}))\ntime.sleep(10**6)", "small"),
    "body never ends": ("os.write(fd, struct.pack('>I', 900000))\nwhile True:\n    os.write(fd, b'x' * 65536)",
                        "small"),
    "sleeps forever (no CPU)": ("time.sleep(10**6)", "small"),
    "spins forever": ("while True:\n    pass", "small"),
    "blocks signals and sleeps": ("import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, range(1, 32))\n"
                                  "time.sleep(10**6)", "small"),
    "result, then floods": ("os.write(fd, frame({'op': 'result', 'outputs': {'a': 1}, 'stdout': ''}))\n"
                            "while True:\n    os.write(fd, frame(PRED))", "small"),
}


def raw_source(body: str) -> str:
    return unchecked(_FIND + body + "\nreturn dspy.Prediction(a=1)")


# ------------------------------------------------------------------------------------------ policy on
_SLOW_TOOL_LOOP = '''
class S(dspy.Module):
    def forward(self, x):
        n = 0
        while True:
            try:
                search(query=x)
                n += 1
            except BaseException:
                pass
        return dspy.Prediction(a=n)
'''

_REPLY_UNDER_MEMORY_PRESSURE = '''
class S(dspy.Module):
    def forward(self, x):
        hog = []
        p = dspy.Predict("q -> a")
        n = 0
        for i in range(100000):
            try:
                hog.append("x" * 2000000)
            except BaseException:
                pass
            try:
                p(q=x + str(i))
                n += 1
            except BaseException:
                pass
        return dspy.Prediction(a=n)
'''

_CATCH_EVERYTHING_AND_RETRY = '''
class S(dspy.Module):
    def forward(self, x):
        p = dspy.Predict("q -> a")
        n = 0
        while True:
            try:
                p(q=x * 1000)
            except BaseException:
                n += 1
        return dspy.Prediction(a=n)
'''

_INIT_FLOOD = '''
class S(dspy.Module):
    def __init__(self):
        super().__init__()
        p = dspy.Predict("q -> a")
        while True:
            try:
                p(q="x" * 100000)
            except BaseException:
                pass

    def forward(self, x):
        return dspy.Prediction(a=1)
'''

POLICY_ATTACKS: dict[str, tuple[str, str]] = {   # name -> (source, bridge kind)
    "slow tool, called forever": (_SLOW_TOOL_LOOP, "slow"),
    "tool that never returns": (_SLOW_TOOL_LOOP, "stuck"),
    "replies read under memory pressure": (_REPLY_UNDER_MEMORY_PRESSURE, "big"),
    "every failure caught, retried forever": (_CATCH_EVERYTHING_AND_RETRY, "big"),
    "__init__ floods the bridge (discovery)": (_INIT_FLOOD, "describe"),
}


class _Bridge(FakeBridge):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def predict(self, request):
        out = super().predict(request)
        if self.kind in ("big", "describe"):
            return dict.fromkeys(out, "y" * 900_000)
        return out

    def tool(self, request):
        if self.kind == "slow":
            time.sleep(0.4)
        elif self.kind == "stuck":
            time.sleep(HARD_STOP * 4)
        return super().tool(request)


# ------------------------------------------------------------------------------------------ running them
def timed(fn: Callable[[], Any], deadline: float) -> tuple[str, float, str]:
    """Run fn in a thread; (outcome, seconds, detail) by the rules of the module docstring."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except SpecialistError as e:
            box["error"] = e
        except BaseException as e:  # noqa: BLE001
            box["broken"] = e

    t0 = time.monotonic()
    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(HARD_STOP)
    seconds = time.monotonic() - t0
    if th.is_alive():
        return "host-hung", seconds, "the call never returned"
    if "broken" in box:
        return "host-broken", seconds, f"{type(box['broken']).__name__}: {str(box['broken'])[:150]}"
    if seconds > deadline + SLACK:
        return "host-hung", seconds, f"ended {seconds - deadline:.2f}s past its deadline"
    detail = box["error"].reason[:120] if "error" in box else "returned"
    return "contained", seconds, detail


def _still_serves(pool: SandboxPool) -> str:
    t0 = time.monotonic()
    try:
        ok = pool.run(HONEST, {"x": 1}, FakeBridge()) == {"answer": 1}
    except Exception as e:  # noqa: BLE001
        return f"the pool no longer serves ({type(e).__name__}: {e})"
    if not ok or time.monotonic() - t0 > 2.0:
        return "the pool answered wrongly or slowly afterwards"
    if pool.worker_pids():
        return f"workers still serving: {pool.worker_pids()}"
    return ""


def _judge(pool: SandboxPool, name: str, fn: Callable[[], Any]) -> Outcome:
    outcome, seconds, detail = timed(fn, pool.call_timeout)
    if outcome == "contained":
        problem = _still_serves(pool)
        if problem:
            outcome, detail = "host-broken", problem
    return Outcome(name, outcome, seconds, detail)


def raw_row() -> FamilyRow:
    row = FamilyRow("hangs: raw frames (no policy, no OS layer)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with SandboxPool(max_workers=2, timeout=TIMEOUT, layers=Layers.none(), tool_names=("search",)) as pool:
            for name, (body, kind) in RAW_ATTACKS.items():
                bridge = _Bridge(kind)
                row.outcomes.append(_judge(pool, name, lambda b=body, br=bridge: run_unchecked(
                    pool, raw_source(b), {}, br)))
    return row


def policy_row() -> FamilyRow:
    row = FamilyRow("hangs: policy on, bridge only (all layers)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with SandboxPool(max_workers=2, timeout=TIMEOUT, memory_mb=256, tool_names=("search",)) as pool:
            for name, (src, kind) in POLICY_ATTACKS.items():
                res = compile_program(src)
                if not res.ok:
                    row.outcomes.append(Outcome(name, "host-broken", 0.0, f"did not compile: {res.reasons[:1]}"))
                    continue
                row.outcomes.append(_judge(pool, name, _call(pool, res.program, kind)))
    return row


def slots_row() -> FamilyRow:
    """Two hanging calls hold both slots; an honest request must still be served once their deadlines pass."""
    row = FamilyRow("hangs: every slot held, an honest request waits")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with SandboxPool(max_workers=2, timeout=TIMEOUT, layers=Layers.none(), tool_names=("search",)) as pool:
            hogs = [threading.Thread(target=_swallow, args=(lambda: run_unchecked(
                pool, raw_source(RAW_ATTACKS["never reads a large reply"][0]), {}, _Bridge("big")),), daemon=True)
                for _ in range(2)]
            for h in hogs:
                h.start()
            time.sleep(0.2)
            # the honest call may wait for a slot (one deadline) and then runs: two deadlines in all
            outcome, seconds, detail = timed(lambda: pool.run(HONEST, {"x": 2}, FakeBridge()), 2 * pool.call_timeout)
            row.outcomes.append(Outcome("honest request behind two hung calls", outcome, seconds, detail))
            for h in hogs:
                h.join(HARD_STOP)
                if h.is_alive():
                    row.outcomes.append(Outcome("a hog never returned", "host-hung", HARD_STOP))
    return row


def _swallow(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001
        pass


def _call(pool: SandboxPool, program: Any, kind: str) -> Callable[[], Any]:
    if kind == "describe":
        return lambda: pool.describe(program)
    bridge = _Bridge(kind)
    return lambda: pool.run(program, {"x": "q"}, bridge)


def hang_rows() -> list[FamilyRow]:
    return [policy_row(), raw_row(), slots_row()]
