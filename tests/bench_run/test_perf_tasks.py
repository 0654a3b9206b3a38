"""benchmarks.perf's tasks: the mixed task is one where routing matters (issue 31 item 3), and calls-to-score
compares concurrency levels on the same seeds."""

from __future__ import annotations

import dspy

from benchmarks.perf import Task, calls_table, calls_to_score, examples, run_one, specialist_source


def _answer(task: Task, question: str, instructions: str) -> str:
    class Call:                    # what the scripted actor reads of a call
        output_fields = ("answer",)

        def field(self, name):
            return question if name == "question" else None

    call = Call()
    call.instructions = instructions
    return task.actor(call)["answer"]


def test_one_instruction_serves_one_family_of_the_mixed_task():
    task, rows = Task("mixed"), examples(40, 0, "mixed")
    assert {r.id[0] for r in rows} == {"q", "m"}

    def score(instructions, family):
        mine = [r for r in rows if r.id[0] == family]
        return sum(_answer(task, r.question, instructions) == r.answer for r in mine) / len(mine)

    codes, sums = "Answer. MODE=codes QUALITY=100", "Answer. MODE=sums QUALITY=100"
    assert score(codes, "q") == 1.0 and score(codes, "m") == 0.0       # a MODE serves its family only
    assert score(sums, "m") == 1.0 and score(sums, "q") == 0.0
    assert 0 < score("Answer.", "q") < 0.5                             # no MODE: only the easiest requests
    assert "MODE=sums QUALITY=70" in specialist_source(70, "sums")


def test_routing_wins_the_mixed_task_and_calls_to_score_compares_k():
    gepa = run_one("gepa", latency=0.0, threads=4, budget=300, seed=0, k=1, n_train=16, n_val=16, task="mixed")
    ours = run_one("adaptive", latency=0.0, threads=4, budget=300, seed=0, k=1, n_train=16, n_val=16, task="mixed")
    assert gepa["best_val"] <= 0.55 < ours["best_val"]          # one prompt for two families vs a specialist each
    rows = calls_to_score("mixed", [0], [1, 2], budget=120, n_train=12, n_val=12, threads=2)
    assert {r["k"] for r in rows} == {1, 2} and all(r["calls"] <= 130 for r in rows)
    assert "| mixed | all |" in calls_table(rows)
    assert dspy.settings.lm is None                              # the runs left the configuration alone


def test_the_routed_floor_runs_a_specialist_for_every_request_of_either_task():
    """The floor is a routed call that reaches the sandbox: on the mixed task the fixed library must route each
    family to its own specialist (a library the router sends to the fallback would measure no sandbox at all)."""
    from benchmarks.perf import floor_library
    from dspy_adaptive import RoutedProgram
    from dspy_adaptive.program.routed import route_of
    from dspy_adaptive.sandbox import SandboxPool
    from dspy_adaptive.testing import scripted_lm

    for name in ("climb", "mixed"):
        task = Task(name)
        actor = scripted_lm(task.actor, model="scripted/actor")
        with SandboxPool(max_workers=2) as pool, dspy.context(lm=actor):
            routed = RoutedProgram(dspy.Predict("question -> answer"), floor_library(task), fast_lm=actor,
                                   sandbox=pool)
            for row in examples(6, 20_000, name):
                route = route_of(routed(question=row.question))
                want = 1 if name == "climb" or row.id[0] == "q" else 2
                assert (route.executed, route.error) == (want, None), (name, row.id, route)


def test_the_ratios_report_the_overlap_bound_and_the_fresh_process_floor():
    from benchmarks.perf import ratios

    def row(method, lat, k=1, **kw):
        base = {"method": method, "latency": lat, "k": k, "threads": 16, "cpu_ms_per_call": 1.0,
                "wall_ms_per_call": 10.0, "best_val": 0.5}
        return {**base, **kw}

    rows = [row("gepa", 0.0, predict_cpu_ms=0.4, routed_cpu_ms=4.0, worker_cpu_ms=2.0),
            row("adaptive", 0.0, 4, cpu_ms_per_call=4.5, wall_ms_per_call=3.0, bound_ms_per_call=2.0),
            row("gepa", 0.05, wall_ms_per_call=12.0),
            row("adaptive", 0.05, 4, wall_ms_per_call=9.0, bound_ms_per_call=6.0, best_val=0.6)]
    text = ratios(rows)
    assert "latency 50 ms, k=4: CPU/call ours/dspy.GEPA = 1.00, wall/call ours/dspy.GEPA = 0.75" in text
    assert "overlap bound 0.50x" in text                 # 6.0 / 12.0, only where there is latency
    assert text.count("overlap bound") == 1
    assert "2.40 ms = 2.40x dspy.GEPA's" in text         # bare predict 0.4 + empty worker 2.0, over 1.0
