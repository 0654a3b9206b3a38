"""Per-call overhead of the sandbox: `python -m dspy_adaptive.sandbox.bench [--calls N] [--pause MS]`.

Runs a trivial specialist (no predictor calls; returns Prediction(answer=x)) N times through a pool and
prints the wall-clock milliseconds per call -- each call a fresh, fully confined worker -- three ways:

* back to back (the headline: median / p90 / max): each call starts as soon as the previous one ended, so
  the workers prepared ahead must also be made at that pace (on a busy machine this measures how fast
  workers can be made as much as what a call waits for);
* paced: the same with a pause between calls (default 5 ms, the least an LM call leaves between two
  specialist calls in a search), so prepared workers are ready: what a call itself costs;
* CPU per call: host, zygote and workers together (this process's CPU, and the zygote's with its reaped
  workers), the figure a machine's throughput depends on;
* CPU per empty worker: one forked, confined and scrambled that is then sent away without a request (fork,
  confinement, exit, reap): what serving each request in a fresh confined process costs before any request
  runs -- the floor under the figure above.

Plus the zygote's start-up and the layers applied.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from . import protocol
from .compiler import compile_program
from .pool import SandboxPool

TRIVIAL = "class Solver(dspy.Module):\n    def forward(self, x):\n        return dspy.Prediction(answer=x)\n"


class _NoBridge:
    def predict(self, request):  # pragma: no cover - the trivial specialist makes no calls
        raise RuntimeError("unexpected predictor call")

    def tool(self, request):  # pragma: no cover
        raise RuntimeError("unexpected tool call")


def _calls(pool: SandboxPool, program, n: int, pause: float) -> list[float]:
    bridge, times = _NoBridge(), []
    for i in range(n):
        if pause:
            time.sleep(pause)
        t = time.perf_counter()
        out = pool.run(program, {"x": i}, bridge)
        times.append(time.perf_counter() - t)
        assert out == {"answer": i}
    return sorted(times)


def _cpu(zygote: int | None) -> float:
    """CPU seconds of this process, its reaped children, and the zygote with its reaped workers."""
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    if zygote:
        try:
            with open(f"/proc/{zygote}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return total


def empty_worker_cpu_ms(pool: SandboxPool, n: int = 200) -> float:
    """ms of CPU (host, zygote and worker) per worker forked, confined and ready, then sent away unused."""
    pool.warm()
    pool._ensure_cfg()
    zygote = pool._forkserver.pid if pool._forkserver else None
    supply = pool._supply
    cpu0 = _cpu(zygote)
    for i in range(n):
        (w,) = supply.new(1)
        protocol.recv(w.fd, deadline=time.monotonic() + 10, max_bytes=4096)   # its "ready": confined
        if i == n - 1:        # the last one leaves on its own (no request comes); asking the zygote for its
            w.sock.close()    # exit code makes it reap every worker, so all their CPU is counted
            w.wait_exit(10)
        w.finish()
    return (_cpu(zygote) - cpu0) / n * 1e3


def measure(calls: int = 200, pause_ms: float = 5.0) -> dict:
    program = compile_program(TRIVIAL).program
    with SandboxPool(max_workers=1, timeout=10) as pool:
        t0 = time.perf_counter()
        report = pool.isolation_report()
        startup = time.perf_counter() - t0
        pool.warm()
        pool.run(program, {"x": -1}, _NoBridge())
        zygote = pool._forkserver.pid if pool._forkserver else None
        cpu0 = _cpu(zygote)
        times = _calls(pool, program, calls, 0.0)
        paced = _calls(pool, program, calls, pause_ms / 1e3)
        time.sleep(0.2)    # the zygote reaps the last workers
        cpu = _cpu(zygote) - cpu0
        empty = empty_worker_cpu_ms(pool, calls)
    return {"calls": calls, "median_ms": statistics.median(times) * 1e3,
            "p90_ms": times[int(0.9 * (len(times) - 1))] * 1e3, "max_ms": times[-1] * 1e3,
            "paced_median_ms": statistics.median(paced) * 1e3, "pause_ms": pause_ms,
            "cpu_per_call_ms": cpu / (2 * calls) * 1e3, "empty_worker_cpu_ms": empty, "startup_ms": startup * 1e3,
            "isolation": report.summary()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--pause", type=float, default=5.0, help="milliseconds between paced calls")
    a = ap.parse_args()
    r = measure(a.calls, a.pause)
    print(f"trivial specialist, {r['calls']} calls, a fresh confined worker each: "
          f"median {r['median_ms']:.3f} ms, p90 {r['p90_ms']:.3f} ms, max {r['max_ms']:.3f} ms back to back; "
          f"median {r['paced_median_ms']:.3f} ms paced ({r['pause_ms']:g} ms between calls); "
          f"{r['cpu_per_call_ms']:.2f} ms of CPU per call (host, zygote and worker); "
          f"{r['empty_worker_cpu_ms']:.2f} ms per worker sent away unused (fork, confinement, exit, reap) "
          f"(zygote start-up and isolation check {r['startup_ms']:.0f} ms, once per pool)\n{r['isolation']}")


if __name__ == "__main__":
    main()
