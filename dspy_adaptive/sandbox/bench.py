"""Per-call overhead of the sandbox: `python -m dspy_adaptive.sandbox.bench [--calls N]`.

Runs a trivial specialist (no predictor calls; returns Prediction(answer=x)) N times through a
pool and prints median / p90 / max wall-clock milliseconds per call -- each call a fresh, fully
confined worker forked from the warm zygote -- plus the zygote's start-up and the layers applied.
"""

from __future__ import annotations

import argparse
import statistics
import time

from .compiler import compile_program
from .pool import SandboxPool

TRIVIAL = "class Solver(dspy.Module):\n    def forward(self, x):\n        return dspy.Prediction(answer=x)\n"


class _NoBridge:
    def predict(self, request):  # pragma: no cover - the trivial specialist makes no calls
        raise RuntimeError("unexpected predictor call")

    def tool(self, request):  # pragma: no cover
        raise RuntimeError("unexpected tool call")


def measure(calls: int = 200) -> dict[str, float]:
    program = compile_program(TRIVIAL).program
    with SandboxPool(max_workers=1, timeout=10) as pool:
        t0 = time.perf_counter()
        report = pool.isolation_report()
        startup = time.perf_counter() - t0
        bridge = _NoBridge()
        pool.run(program, {"x": -1}, bridge)
        times = []
        for i in range(calls):
            t = time.perf_counter()
            out = pool.run(program, {"x": i}, bridge)
            times.append(time.perf_counter() - t)
            assert out == {"answer": i}
    times.sort()
    return {"calls": calls, "median_ms": statistics.median(times) * 1e3,
            "p90_ms": times[int(0.9 * (len(times) - 1))] * 1e3, "max_ms": times[-1] * 1e3,
            "startup_ms": startup * 1e3, "isolation": report.summary()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=200)
    r = measure(ap.parse_args().calls)
    print(f"trivial specialist, {r['calls']} calls, a fresh confined worker each: "
          f"median {r['median_ms']:.3f} ms, p90 {r['p90_ms']:.3f} ms, max {r['max_ms']:.3f} ms "
          f"(zygote start-up and isolation check {r['startup_ms']:.0f} ms, once per pool)\n{r['isolation']}")


if __name__ == "__main__":
    main()
