"""Speed benchmark: AdaptiveGEPA vs dspy.GEPA on the same synthetic task, scripted LMs, latency, budget.

    python -m benchmarks.perf                         # the default table (latency 0 and 50 ms, k=1 and 4)
    python -m benchmarks.perf --latencies 0.05 --threads 16 --budget 300 --seeds 0 1 2 --k 1 4
    python -m benchmarks.perf --task lottery          # the first, noisier task (see Task)
    python -m benchmarks.perf --rss                   # RSS per archived candidate, 180 validation rows
    python -m benchmarks.perf --calls-to-score        # scored calls to reach a score at k = 1, 2, 4 (climb, mixed)

Every configuration runs in a fresh subprocess, so CPU time (own threads + sandbox workers, reaped
through the zygote) and peak RSS belong to that run alone. The task: requests "qN: ..." with gold
"aN"; the scripted actor's answers depend on a `QUALITY=NN` token in the instructions it runs under
(seed: 40). dspy.GEPA's reflection proposes an instruction with a new quality; Adaptive-GEPA's
activates (then rewrites) a one-predictor specialist with a new quality -- how the new quality is
drawn is the Task. Both searches see the same rule, so what differs is how they spend the budget,
wall time and CPU.

Figures per run: scored calls, wall, CPU, CPU ms and wall ms per scored call, the critical-path ideal
(sum over the run's own sequential steps of ceil(rows / threads) x depth x latency; ours from the
engine's recorded schedule, dspy.GEPA's from its LM-call intervals: overlapping calls form one step),
parallel efficiency = ideal / wall, peak RSS, final validation score, and for ours the overlap bound
(the run's own step durations summed and divided by k: the wall time of the same steps, at the durations
measured, overlapped perfectly k at a time: a wall time above it is scheduling's, and only shorter steps
go below it). At latency 0 the CPU floors: one bare dspy.Predict call, one routed call of ours with no
search around it, and one sandbox worker sent away unused (fork, confinement, exit, reap).
Absolute times on a shared 2-core machine move around; the ours/dspy.GEPA ratios within one invocation
are the figures to read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import dspy

from dspy_adaptive.testing import scripted_lm

SEED_QUALITY = 40


# -- the synthetic task ------------------------------------------------------------------------------

def examples(n: int, offset: int, task: str = "climb") -> list[dspy.Example]:
    """n requests "qN: ..." with gold "aN"; the mixed task alternates them with "mN: ..." sums (gold the sum)."""
    out = []
    for i in range(offset, offset + n):
        if task == "mixed" and i % 2:
            out.append(dspy.Example(id=f"m{i}", question=f"m{i}: what is {i} plus {i + 3}?", answer=str(2 * i + 3))
                       .with_inputs("question"))
        else:
            out.append(dspy.Example(id=f"q{i}", question=f"q{i}: what is the code for item {i}?", answer=f"a{i}")
                       .with_inputs("question"))
    return out


def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    ok = str(getattr(pred, "answer", "")).strip() == gold.answer
    return dspy.Prediction(score=float(ok), feedback="correct" if ok else "wrong: expected the code of the item")


def _quality(text: str | None) -> int:
    m = re.search(r"QUALITY=(\d+)", text or "")
    return int(m.group(1)) if m else SEED_QUALITY


def _mode(text: str | None) -> str | None:
    m = re.search(r"MODE=(\w+)", text or "")
    return m.group(1) if m else None


#: The mixed task's two families: request prefix -> (the MODE an instruction needs, a specialist's description).
FAMILIES = {"q": ("codes", "Item codes: requests asking for the code of an item (they start with 'q')."),
            "m": ("sums", "Sums: requests asking for the sum of two numbers (they start with 'm').")}


def _h(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


class CallLog:
    """LM-call intervals (for dspy.GEPA's critical path)."""

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []
        self.lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:     # Ray actors get a fresh log (intervals are driver-side only)
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()

    def wrap(self, respond, latency: float):
        def timed(call):
            t0 = time.perf_counter()
            if latency:
                time.sleep(latency)
            out = respond(call)
            with self.lock:
                self.intervals.append((t0, time.perf_counter()))
            return out
        return timed


class Task:
    """How the scripted LMs behave. Two tasks, same interface:

    climb (default): each request has a fixed difficulty in [0, 100); the actor answers it right iff
        the instructions' QUALITY exceeds it, so a candidate's validation score is a deterministic,
        monotone function of its quality. A reflection reads the quality of what it is shown (the
        current instruction for dspy.GEPA, the current specialist source for us; 40 for the seed) and
        proposes quality + a step in [-10, +20] drawn from a hash of its prompt -- improvement builds
        on the parent, as real reflection does, so the final score measures how far a search climbs
        within the budget.
    lottery: the first version of this benchmark: every proposal draws a fresh quality in [40, 94]
        and each (request, quality) pair is right with that probability. The final score is then the
        luckiest of a handful of draws plus per-row noise (spread ~0.05 across seeds), which hides
        any real difference between the searches at 3 seeds.
    mixed: climb over two request families, item codes ("qN") and sums ("mN"), where routing matters, as in
        the paper: an instruction answers a family only under that family's MODE (`MODE=codes` or `MODE=sums`;
        with none, only requests of difficulty < 20), then as climb. One instruction holds one MODE, so
        dspy.GEPA's single prompt can serve one family at a time (its reflection writes the MODE of a failing
        request it reads); Adaptive-GEPA activates a specialist per family (the MODE of the family its traces
        fail on), routes each family to its own, and climbs each specialist's quality.
    """

    def __init__(self, name: str):
        if name not in ("climb", "lottery", "mixed"):
            raise ValueError(f"unknown task {name!r} (climb | lottery | mixed)")
        self.name = name

    def right(self, question: str, n: str, q: int) -> bool:
        if self.name in ("climb", "mixed"):
            return _h(f"difficulty {question[0]}{n}") % 100 < q if self.name == "mixed" else \
                _h(f"difficulty {n}") % 100 < q
        return _h(f"{question}|{q}") % 100 < q

    def propose(self, prompt: str, current: str | None) -> int:
        if self.name in ("climb", "mixed"):
            return max(0, min(100, _quality(current) + _h(prompt) % 31 - 10))
        return 40 + _h(prompt) % 55

    def actor(self, call) -> dict:
        specialists, question = call.field("specialists") or "", call.field("question") or ""
        if "slot" in call.output_fields:                     # Adaptive-GEPA's router
            if self.name != "mixed":
                return {"slot": "1" if re.search(r"^1: ", specialists, re.M) else "0"}
            cue = FAMILIES.get(question[:1], ("", "?"))[1].split(":")[0]
            found = re.search(rf"^(\d+): {re.escape(cue)}", specialists, re.M)
            return {"slot": found.group(1) if found else "0"}
        m = re.match(r"([qm])(\d+):", question)
        if not m or (self.name != "mixed" and m.group(1) != "q"):
            return {"answer": "wrong"}
        q, mode = _quality(call.instructions), _mode(call.instructions)
        if self.name == "mixed" and mode != FAMILIES[m.group(1)][0]:
            q = min(q, 20) if mode is None else 0            # no MODE: only the easiest; another MODE: none
        right = self.right(question, m.group(2), q)
        if m.group(1) == "m":
            a, b = (int(x) for x in re.findall(r"(\d+) plus (\d+)", question)[0])
            return {"answer": str(a + b) if right else "wrong"}
        return {"answer": f"a{m.group(2)}" if right else "wrong"}

    @staticmethod
    def failing_family(prompt: str) -> str:
        """The family of the first request a reflection prompt shows failing (what reflection reads)."""
        for m in re.finditer(r"([qm])\d+: .*?(?:score[^0-9]*([0-9.]+)|wrong)", prompt, re.S):
            if m.group(2) is None or float(m.group(2)) < 1:
                return m.group(1)
        return "q" if _h(prompt) % 2 else "m"

    def adaptive_reflection(self, call):
        fields = call.output_fields
        if self.name == "mixed":
            return self._mixed_reflection(call)
        if "action" in fields:
            active = "(active" in (call.field("specialists") or "")
            return {"action": "rewrite_program" if active else "activate", "slot": "1"}
        if "profile" in fields:                              # activation: the seed runs at SEED_QUALITY
            return {"description": "General solver for every request.",
                    "program": specialist_source(self.propose(call.prompt, None)), "profile": "fast"}
        if "new_program" in fields:
            return {"new_program": specialist_source(self.propose(call.prompt, call.field("program")))}
        return "unexpected"

    def _mixed_reflection(self, call):
        fields, specialists = call.output_fields, call.field("specialists") or ""
        active = {p: re.search(rf"^(\d+) \(active[^)]*\): {re.escape(d.split(':')[0])}", specialists, re.M)
                  for p, (_, d) in FAMILIES.items()}
        free = re.findall(r"^(\d+) \(free\)", specialists, re.M)
        if "action" in fields:
            family = self.failing_family(call.field("traces") or call.prompt)
            if active[family] is None and free:
                return {"action": "activate", "slot": free[0]}
            slot = active[family] or next((a for a in active.values() if a), None)
            return {"action": "rewrite_program", "slot": slot.group(1)} if slot else {"action": "activate",
                                                                                      "slot": free[0]}
        if "profile" in fields:
            family = next((p for p, a in active.items() if a is None), "q")
            mode, desc = FAMILIES[family]
            return {"description": desc, "program": specialist_source(self.propose(call.prompt, None), mode),
                    "profile": "fast"}
        if "new_program" in fields:
            current = call.field("program") or ""
            return {"new_program": specialist_source(self.propose(call.prompt, current), _mode(current))}
        return "unexpected"

    def gepa_reflection(self, call):
        """dspy.GEPA's instruction proposer is a DSPy signature with a `new_instruction` output."""
        current = call.field("current_instruction")
        q = self.propose(call.prompt, current)
        if self.name != "mixed":
            return {"new_instruction": f"Answer the question. QUALITY={q}"}
        mode = FAMILIES[self.failing_family(call.prompt)][0]
        q = q if mode == _mode(current) else self.propose(call.prompt, None)   # a new MODE starts from the seed's
        return {"new_instruction": f"Answer the question. MODE={mode} QUALITY={q}"}


def specialist_source(q: int, mode: str | None = None) -> str:
    tokens = f"MODE={mode} QUALITY={q}" if mode else f"QUALITY={q}"
    return ("class Solver(dspy.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            f"        self.solve = dspy.Predict(\"question -> answer\", instructions=\"Answer. {tokens}\")\n\n"
            "    def forward(self, question):\n"
            "        return dspy.Prediction(answer=self.solve(question=question).answer)\n")


# -- one run (in its own process) ------------------------------------------------------------------------

def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class TimedMetric:
    """The metric, with the wall time of every call (the n-th scored call's time is when candidates found at
    n calls existed: the basis of time to quality)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, gold, pred, trace=None, pred_name=None, pred_trace=None):
        out = metric(gold, pred, trace, pred_name, pred_trace)
        with self.lock:
            self.times.append(time.perf_counter())
        return out

    def __getstate__(self) -> dict[str, Any]:      # in a Ray actor the times stay there: time to quality is
        return {}                                  # measured with threads only

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()


def quality_times(times: list[float], t0: float, found_at: list[int], scores: list[float]) -> list[tuple[float, float]]:
    """(seconds since t0, validation score) of each candidate, in discovery order."""
    ordered = sorted(times)
    out = []
    for calls, score in sorted(zip(found_at, scores)):
        if ordered:
            out.append((ordered[min(max(calls, 1), len(ordered)) - 1] - t0, score))
    return out


def time_to(points: list[tuple[float, float]], target: float) -> float | None:
    """The first time a candidate reached `target`, or None."""
    hits = [t for t, score in points if score >= target - 1e-9]
    return min(hits) if hits else None


def run_one(method: str, *, latency: float, threads: int, budget: int, seed: int, k: int,
            n_train: int, n_val: int, task: str = "climb", reuse_scores: bool = False,
            executor: str = "threads") -> dict[str, Any]:
    log, t = CallLog(), Task(task)
    timed = TimedMetric()
    actor = scripted_lm(log.wrap(t.actor, latency), model="scripted/actor")
    train, val = examples(n_train, 0, task), examples(n_val, 10_000, task)
    program = dspy.Predict("question -> answer")
    bound = None
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if executor == "ray":          # a running Ray, as on a cluster that is up: its own start is not the search's
        import ray
        ray.init(num_cpus=max(2, threads), include_dashboard=False, log_to_driver=False)
    cpu0, child0, t0 = time.process_time(), _children_cpu(), time.perf_counter()
    with dspy.context(lm=actor):
        if method == "adaptive":
            from dspy_adaptive import AdaptiveGEPA
            refl = scripted_lm(log.wrap(t.adaptive_reflection, latency), model="scripted/reflection")
            opt = AdaptiveGEPA(timed, reflection_lm=refl, max_metric_calls=budget, num_threads=threads,
                               seed=seed, track_stats=True, progress=False, use_merge=False,
                               max_concurrent_proposals=k, reuse_scores=reuse_scores, executor=executor)
            routed = opt.compile(program, trainset=train, valset=val)
            res = routed.detailed_results
            routed.close()
            calls, best, n_cands = res.total_metric_calls, max(res.val_aggregate_scores), len(res.candidates)
            from dspy_adaptive.search.schedule import critical_path, overlap_bound
            ideal = critical_path(res.schedule, threads, latency)
            bound = overlap_bound(res.schedule, k)
        else:
            refl = scripted_lm(log.wrap(t.gepa_reflection, latency), model="scripted/reflection")
            opt = dspy.GEPA(metric=timed, reflection_lm=refl, max_metric_calls=budget, num_threads=threads,
                            seed=seed, track_stats=True, use_merge=False)
            out = opt.compile(program, trainset=train, valset=val)
            res = out.detailed_results
            calls, best, n_cands = res.total_metric_calls, max(res.val_aggregate_scores), len(res.candidates)
            ideal = interval_critical_path(log.intervals, threads, latency)
    wall = time.perf_counter() - t0
    points = quality_times(timed.times, t0, list(res.discovery_eval_counts), list(res.val_aggregate_scores))
    cpu = (time.process_time() - cpu0) + (_children_cpu() - child0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    floors = {}
    if method == "gepa" and not latency:
        floors = {"predict_cpu_ms": predictor_call_cpu_ms(t, threads), "routed_cpu_ms": routed_call_cpu_ms(t, threads),
                  "worker_cpu_ms": worker_cpu_ms()}
    return {"method": method, "task": task, "k": k if method == "adaptive" else 1, "seed": seed, "latency": latency,
            "threads": threads, "calls": calls, "wall_s": wall, "cpu_s": cpu,
            "cpu_ms_per_call": 1000 * cpu / max(calls, 1), "wall_ms_per_call": 1000 * wall / max(calls, 1),
            "ideal_s": ideal, "efficiency": (ideal / wall) if latency and wall else None,
            "bound_ms_per_call": None if bound is None else 1000 * bound / max(calls, 1),
            "peak_rss_mb": rss / 1024, "rss_growth_mb": (rss - rss0) / 1024, "candidates": n_cands,
            "best_val": best, "predict_cpu_ms": floors.get("predict_cpu_ms"),
            "routed_cpu_ms": floors.get("routed_cpu_ms"), "worker_cpu_ms": floors.get("worker_cpu_ms"),
            "quality_points": points, "executor": executor,
            "startup_s": _ray_startup() if executor == "ray" else 0.0}


def calls_to_score(task: str, seeds: list[int], ks: list[int], budget: int, n_train: int, n_val: int,
                   threads: int = 4) -> list[dict[str, Any]]:
    """Concurrency's cost in scored calls: per seed, the calls each k needed to first archive a candidate as good
    as the best every k reached (latency 0; in this process: only calls are compared)."""
    t = Task(task)
    rows = []
    for seed in seeds:
        curves = {}
        for k in ks:
            actor = scripted_lm(t.actor, model="scripted/actor")
            refl = scripted_lm(t.adaptive_reflection, model="scripted/reflection")
            from dspy_adaptive import AdaptiveGEPA
            with dspy.context(lm=actor):
                res = AdaptiveGEPA(metric, reflection_lm=refl, max_metric_calls=budget, num_threads=threads, seed=seed,
                                   track_stats=True, progress=False, use_merge=False,
                                   max_concurrent_proposals=k).compile(
                    dspy.Predict("question -> answer"), trainset=examples(n_train, 0, task),
                    valset=examples(n_val, 10_000, task)).detailed_results
            curves[k] = sorted(zip(res.discovery_eval_counts, res.val_aggregate_scores))
            stale = sum(1 for p in res.proposals if p["kind"] == "stale")
            rows.append({"task": task, "seed": seed, "k": k, "best": max(v for _, v in curves[k]), "stale": stale})
        target = min(max(v for _, v in c) for c in curves.values())
        for r in rows[-len(ks):]:
            r.update(target=target, calls=next(c for c, v in curves[r["k"]] if v >= target - 1e-9))
    return rows


def calls_table(rows: list[dict[str, Any]]) -> str:
    out = ["| task | seed | target | " + " | ".join(f"calls k={k}" for k in sorted({r['k'] for r in rows})) + " |",
           "|---|---:|---:|" + "---:|" * len({r["k"] for r in rows})]
    ks = sorted({r["k"] for r in rows})
    for task, seed in sorted({(r["task"], r["seed"]) for r in rows}):
        mine = {r["k"]: r for r in rows if r["task"] == task and r["seed"] == seed}
        out.append(f"| {task} | {seed} | {mine[ks[0]]['target']:.3f} | "
                   + " | ".join(str(mine[k]["calls"]) for k in ks) + " |")
    for task in sorted({r["task"] for r in rows}):
        tot = {k: sum(r["calls"] for r in rows if r["task"] == task and r["k"] == k) for k in ks}
        out.append(f"| {task} | all | | " + " | ".join(f"{tot[k]} ({tot[k] / tot[ks[0]]:.2f}x)" for k in ks) + " |")
    return "\n".join(out)


def _ray_startup() -> float:
    from dspy_adaptive.search.ray_executor import RayExecutor
    return RayExecutor.last_startup_s


def predictor_call_cpu_ms(task: Task, threads: int, n: int = 600) -> float:
    """CPU of one bare `dspy.Predict` call on the same scripted actor, run on `threads` threads: the part
    of a scored call that neither optimizer can avoid (every scored call runs at least one)."""
    actor, program = scripted_lm(task.actor, model="scripted/actor"), dspy.Predict("question -> answer")
    return _cpu_per_call(lambda q: program(question=q), actor, threads, n, task=task.name)


def floor_library(task: Task):
    """The library the routed floor runs: the task's one-predictor program as the one specialist, or on the
    mixed task one specialist per family, described as the task's router reads them (every request is routed
    to a specialist, none to the fallback)."""
    from dspy_adaptive import Library, Slot

    lib = Library.empty(5)
    if task.name != "mixed":
        return lib.with_slot(1, Slot().activated("General solver for every request.",
                                                 specialist_source(SEED_QUALITY), "fast"))
    for slot, (mode, description) in enumerate(FAMILIES.values(), start=1):
        lib = lib.with_slot(slot, Slot().activated(description, specialist_source(SEED_QUALITY, mode), "fast"))
    return lib


def routed_call_cpu_ms(task: Task, threads: int, n: int = 600) -> float:
    """CPU of one scored call of ours with every search cost taken away: a fixed library of the task's
    one-predictor programs (`floor_library`: every request is routed to a specialist), router decisions
    memoised (no router LM call), a warm sandbox pool, rows on `threads` threads. Host CPU plus the sandbox's:
    every specialist call runs in a fresh worker forked from the pool's zygote, which reaps it, so the zygote's
    own and its reaped children's CPU (/proc/<zygote>/stat) is the sandbox's. This is the floor of any design that runs
    generated specialist code in a fresh confined process per request and bridges its predictor call back
    into DSPy."""
    from dspy_adaptive import RoutedProgram
    from dspy_adaptive.program.route_memo import RouteMemo
    from dspy_adaptive.sandbox import SandboxPool

    actor = scripted_lm(task.actor, model="scripted/actor")
    lib = floor_library(task)
    with SandboxPool(max_workers=threads) as pool:
        routed = RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=actor, sandbox=pool)
        routed = routed.with_library(lib, route_memo=RouteMemo())
        return _cpu_per_call(lambda q: routed(question=q), actor, threads, n,
                             extra_cpu=lambda: _tree_cpu_s(pool._forkserver.pid if pool._forkserver else None),
                             task=task.name)


def worker_cpu_ms(n: int = 300) -> float:
    """CPU (host, zygote, worker) of one sandbox worker forked, confined and ready, then sent away unused
    (`sandbox.bench.empty_worker_cpu_ms`): what a fresh confined process per request costs before any
    request runs, so the least any design with that guarantee adds to a scored call."""
    from dspy_adaptive.sandbox import SandboxPool
    from dspy_adaptive.sandbox.bench import empty_worker_cpu_ms

    with SandboxPool(max_workers=1) as pool:
        return empty_worker_cpu_ms(pool, n)


def _tree_cpu_s(pid: int | None) -> float:
    """CPU seconds of a process and of its children it has reaped (utime, stime, cutime, cstime)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _cpu_per_call(call, actor, threads: int, n: int, extra_cpu=lambda: 0.0, task: str = "climb") -> float:
    """ms of CPU per call over n of `task`'s requests on `threads` threads, after one unmeasured warm-up pass."""
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    qs = [e.question for e in examples(n, 20_000, task)]
    with dspy.context(lm=actor), ThreadPoolExecutor(threads) as pool:
        ctx = contextvars.copy_context()
        run = lambda q: ctx.copy().run(call, q)  # noqa: E731 - each thread sees the dspy context
        list(pool.map(run, qs))
        c0, e0 = time.process_time(), extra_cpu()
        list(pool.map(run, qs))
        cpu = (time.process_time() - c0) + (extra_cpu() - e0)
    return 1000 * cpu / n


def interval_critical_path(intervals: list[tuple[float, float]], threads: int, latency: float) -> float:
    """Overlapping LM calls form one step (a batch run concurrently); steps run one after another."""
    total, group, end = 0.0, 0, -math.inf
    for s, e in sorted(intervals):
        if s > end and group:
            total += math.ceil(group / threads) * latency
            group = 0
        group += 1
        end = max(end, e) if group > 1 else e
    if group:
        total += math.ceil(group / threads) * latency
    return total


# -- driver ------------------------------------------------------------------------------------------------

def spawn(args: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "benchmarks.perf", "--single", *args], capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"perf run {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| method | k | latency ms | seeds | scored calls | wall s | CPU s | CPU ms/call | wall ms/call | "
            "ideal s | efficiency | overlap bound ms/call | peak RSS MB | best val |")
    lines = [head, "|" + "---|" * 14]
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault((r["latency"], r["method"], r["k"]), []).append(r)
    def mean_of(rs: list, key: str) -> float:
        vals = [r[key] for r in rs if r.get(key) is not None]
        return statistics.mean(vals) if vals else float("nan")

    for (lat, method, k), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] != "gepa", kv[0][2])):
        def m(key, rs=rs):
            return mean_of(rs, key)
        lines.append(f"| {'dspy.GEPA' if method == 'gepa' else 'Adaptive-GEPA'} | {k} | {1000 * lat:.0f} | {len(rs)} | "
                     f"{m('calls'):.0f} | {m('wall_s'):.2f} | {m('cpu_s'):.2f} | {m('cpu_ms_per_call'):.2f} | "
                     f"{m('wall_ms_per_call'):.1f} | {m('ideal_s'):.2f} | {m('efficiency'):.2f} | "
                     f"{m('bound_ms_per_call'):.1f} | "
                     f"{m('peak_rss_mb'):.0f} | {m('best_val'):.3f} |")
    return "\n".join(lines)


def ratios(rows: list[dict[str, Any]]) -> str:
    out = []
    for lat in sorted({r["latency"] for r in rows}):
        base = [r for r in rows if r["latency"] == lat and r["method"] == "gepa"]
        if not base:
            continue
        for k in sorted({r["k"] for r in rows if r["method"] == "adaptive"}):
            ours = [r for r in rows if r["latency"] == lat and r["method"] == "adaptive" and r["k"] == k]
            if not ours:
                continue
            cpu = (statistics.mean(r["cpu_ms_per_call"] for r in ours)
                   / statistics.mean(r["cpu_ms_per_call"] for r in base))
            wall = (statistics.mean(r["wall_ms_per_call"] for r in ours)
                    / statistics.mean(r["wall_ms_per_call"] for r in base))
            val = statistics.mean(r["best_val"] for r in ours) - statistics.mean(r["best_val"] for r in base)
            line = (f"- latency {1000 * lat:.0f} ms, k={k}: CPU/call ours/dspy.GEPA = {cpu:.2f}, "
                    f"wall/call ours/dspy.GEPA = {wall:.2f}, best val ours - dspy.GEPA = {val:+.3f}")
            bounds = [r["bound_ms_per_call"] for r in ours if r.get("bound_ms_per_call") is not None]
            if lat and bounds:
                bound = statistics.mean(bounds) / statistics.mean(r["wall_ms_per_call"] for r in base)
                line += (f"; overlap bound {bound:.2f}x (these runs' own steps, at their measured durations, "
                         f"overlapped perfectly {k} at a time)")
            out.append(line)
    base = [r["cpu_ms_per_call"] for r in rows if r["method"] == "gepa" and not r["latency"]]
    predict = [r["predict_cpu_ms"] for r in rows if r.get("predict_cpu_ms")]
    routed = [r["routed_cpu_ms"] for r in rows if r.get("routed_cpu_ms")]
    worker = [r["worker_cpu_ms"] for r in rows if r.get("worker_cpu_ms")]
    if base and predict and routed:
        b, f, g = statistics.mean(base), statistics.mean(predict), statistics.mean(routed)
        threads = rows[0]["threads"]
        out.append(f"- floors at {threads} threads, against dspy.GEPA's {b:.2f} ms of CPU per scored call: "
                   f"one bare dspy.Predict call {f:.2f} ms = {f / b:.2f}x; one routed call of ours with no search "
                   "around it (fixed library, every request routed to a specialist, router memoised, warm sandbox) "
                   f"{g:.2f} ms = {g / b:.2f}x. "
                   "Every scored call of ours costs at least the latter, so ours/dspy.GEPA cannot go below it.")
        if worker:
            w = statistics.mean(worker)
            out.append(f"- a sandbox worker sent away unused (fork, confinement, exit, reap) costs {w:.2f} ms; with "
                       f"the bare dspy.Predict call its request bridges to, {f + w:.2f} ms = {(f + w) / b:.2f}x "
                       "dspy.GEPA's: "
                       "the least any design that serves each specialist request in a fresh confined process "
                       "can cost per scored call.")
    return "\n".join(out)


def time_to_quality(rows: list[dict[str, Any]]) -> str:
    """Per latency and method: the wall time at which a run first reached dspy.GEPA's final best validation
    score (same seed), the figure users feel, beside the per-call ratios."""
    out = []
    for lat in sorted({r["latency"] for r in rows}):
        for (method, k) in sorted({(r["method"], r["k"]) for r in rows if r["latency"] == lat}):
            times, missed = [], 0
            for r in rows:
                if r["latency"] != lat or r["method"] != method or r["k"] != k:
                    continue
                base = [b for b in rows if b["latency"] == lat and b["method"] == "gepa" and b["seed"] == r["seed"]]
                if not base:
                    continue
                hit = time_to([tuple(p) for p in r["quality_points"]], base[0]["best_val"])
                if hit is None:
                    missed += 1
                else:
                    times.append(hit)
            name = "dspy.GEPA" if method == "gepa" else f"Adaptive-GEPA k={k}"
            shown = f"{statistics.mean(times):.2f} s (mean of {len(times)})" if times else "never"
            out.append(f"- latency {1000 * lat:.0f} ms, {name}: reached dspy.GEPA's final best validation score at "
                       f"{shown}" + (f"; not reached in {missed} run(s)" if missed else ""))
    return "\n".join(out)


def ray_comparison(rows: list[dict[str, Any]]) -> str:
    """Wall per scored call through Ray actors against threads (same seeds), and Ray's overhead per row."""
    lines = ["| seed | threads wall ms/call | ray wall ms/call (actors ready) | ray / threads | ray overhead ms/row | "
             "actor start-up s |", "|---:|---:|---:|---:|---:|---:|"]
    ratios_, overheads = [], []
    for seed in sorted({r["seed"] for r in rows}):
        th = [r for r in rows if r["seed"] == seed and r["executor"] == "threads"]
        ry = [r for r in rows if r["seed"] == seed and r["executor"] == "ray"]
        if not th or not ry:
            continue
        a, b = th[0], ry[0]
        steady = (b["wall_s"] - b["startup_s"]) * 1000 / max(b["calls"], 1)
        ratio = steady / a["wall_ms_per_call"]
        overhead = steady - a["wall_ms_per_call"]
        ratios_.append(ratio)
        overheads.append(overhead)
        lines.append(f"| {seed} | {a['wall_ms_per_call']:.1f} | {steady:.1f} | {ratio:.2f} | {overhead:+.1f} | "
                     f"{b['startup_s']:.1f} |")
    if ratios_:
        lines.append(f"\nmean ray/threads wall per call {statistics.mean(ratios_):.2f}; mean Ray overhead "
                     f"{statistics.mean(overheads):+.1f} ms per scored call")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")   # offline; inherited by the runs it spawns
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--latencies", type=float, nargs="+", default=[0.0, 0.05], help="per-LM-call latency (s)")
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--budget", type=int, default=300, help="max_metric_calls for both optimizers")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--k", type=int, nargs="+", default=[1, 4], help="AdaptiveGEPA max_concurrent_proposals")
    p.add_argument("--train", type=int, default=30)
    p.add_argument("--val", type=int, default=30)
    p.add_argument("--task", choices=("climb", "lottery", "mixed"), nargs="+", default=["climb", "mixed"],
                   help="how the scripted LMs behave (see Task): climb (one family) and mixed (two families where "
                        "routing matters) by default")
    p.add_argument("--rss", action="store_true", help="measure RSS per archived candidate (180 val rows)")
    p.add_argument("--out", default=None, help="also write the rows as JSON here")
    p.add_argument("--reuse-scores", action="store_true",
                   help="AdaptiveGEPA reuse_scores=True (the pre-issue-15 (content hash, row) reuse) instead of the "
                        "paper's accounting, where every scoring invocation is executed and charged")
    p.add_argument("--executor", choices=("threads", "ray"), default="threads",
                   help="ray: compare AdaptiveGEPA on Ray actors with threads at --latencies (default here 0.2 s): "
                        "wall per scored call and Ray's overhead per row (needs the ray extra)")
    p.add_argument("--calls-to-score", action="store_true",
                   help="concurrency's cost: scored calls each k (--k, default here 1 2 4) needs to reach the score "
                        "every k reached, per task and seed")
    p.add_argument("--single", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.calls_to_score:
        ks = a.k if a.k != [1, 4] else [1, 2, 4]
        rows = [r for task in a.task for r in calls_to_score(task, a.seeds, ks, a.budget, a.train, a.val)]
        print(calls_table(rows))
        if a.out:
            with open(a.out, "w") as f:
                json.dump(rows, f, indent=1)
        return
    if a.single is not None:
        method, lat, th, bud, seed, k, ntr, nv, task, *rest = a.single
        print(json.dumps(run_one(method, latency=float(lat), threads=int(th), budget=int(bud), seed=int(seed),
                                 k=int(k), n_train=int(ntr), n_val=int(nv), task=task,
                                 reuse_scores="reuse" in rest, executor="ray" if "ray" in rest else "threads")))
        return
    if a.executor == "ray":
        latency = a.latencies[0] if a.latencies != [0.0, 0.05] else 0.2    # default here: a 200 ms LM
        rows = []
        for seed in a.seeds:
            for ex in ("threads", "ray"):
                rows.append(spawn(["adaptive", str(latency), str(a.threads), str(a.budget), str(seed), "1",
                                   str(a.train), str(a.val), a.task[0]] + (["ray"] if ex == "ray" else [])))
            print(f"done seed={seed}", file=sys.stderr)
        print(f"AdaptiveGEPA, latency {1000 * latency:.0f} ms, {a.threads} threads / actors, budget {a.budget}:")
        print(ray_comparison(rows))
        if a.out:
            with open(a.out, "w") as f:
                json.dump(rows, f, indent=1)
        return
    if a.rss:
        # lottery: its searches keep archiving candidates (climb stops once one scores 1.0), and
        # growth over many candidates is what this measures
        rows = [spawn(["adaptive", "0", str(a.threads), "3000", str(s), "1", "60", "180", "lottery"])
                for s in a.seeds[:1]]
        for r in rows:
            per = r["rss_growth_mb"] / max(r["candidates"], 1)
            print(f"180 val rows: {r['candidates']} candidates, RSS growth {r['rss_growth_mb']:.1f} MB "
                  f"-> {per:.2f} MB per archived candidate (peak {r['peak_rss_mb']:.0f} MB)")
        return
    rows = []
    for task in a.task:
        for lat in a.latencies:
            for seed in a.seeds:
                common = [str(a.threads), str(a.budget), str(seed)]
                rows.append(spawn(["gepa", str(lat), *common, "1", str(a.train), str(a.val), task]))
                for k in a.k:
                    rows.append(spawn(["adaptive", str(lat), *common, str(k), str(a.train), str(a.val), task]
                                      + (["reuse"] if a.reuse_scores else [])))
                print(f"done task={task} latency={lat} seed={seed}", file=sys.stderr)
    for task in a.task:
        mine = [r for r in rows if r["task"] == task]
        print(f"## task: {task}\n")
        print(table(mine))
        print()
        print(ratios(mine))
        print()
        print(time_to_quality(mine))
        print()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
