"""Per-call overhead of the sandbox: `python -m dspy_adaptive.sandbox.bench [--calls N]`.

Runs a trivial specialist (no predictor calls; returns Prediction(answer=x)) N times through a
warm pool and prints median / p90 / max wall-clock milliseconds per call, plus worker start-up.
"""

from __future__ import annotations

import argparse
import statistics
import time

from .compiler import compile_program
from .pool import SandboxPool

TRIVIAL = "class Solver(dspy.Module):\n    def forward(self, x):\n        return dspy.Prediction(answer=x)\n"


class _NoBridge:
    def predict(self, **kw):  # pragma: no cover - the trivial specialist makes no calls
        raise RuntimeError("unexpected predictor call")

    def tool(self, **kw):  # pragma: no cover
        raise RuntimeError("unexpected tool call")


def measure(calls: int = 200) -> dict[str, float]:
    program = compile_program(TRIVIAL).program
    with SandboxPool(max_workers=1, timeout=10) as pool:
        t0 = time.perf_counter()
        pool.warm(1)
        startup = time.perf_counter() - t0
        bridge = _NoBridge()
        pool.run(program, {"x": -1}, bridge)  # first call loads the program into the worker
        times = []
        for i in range(calls):
            t = time.perf_counter()
            out = pool.run(program, {"x": i}, bridge)
            times.append(time.perf_counter() - t)
            assert out == {"answer": i}
    times.sort()
    return {"calls": calls, "median_ms": statistics.median(times) * 1e3,
            "p90_ms": times[int(0.9 * (len(times) - 1))] * 1e3, "max_ms": times[-1] * 1e3,
            "worker_startup_ms": startup * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=200)
    r = measure(ap.parse_args().calls)
    print(f"trivial specialist, {r['calls']} calls through a warm pool: "
          f"median {r['median_ms']:.3f} ms, p90 {r['p90_ms']:.3f} ms, max {r['max_ms']:.3f} ms "
          f"(worker start-up {r['worker_startup_ms']:.0f} ms, once per worker)")


if __name__ == "__main__":
    main()
