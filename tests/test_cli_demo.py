"""The demo main job end to end with scripted LMs (the real run uses the local GGUF model)."""

from __future__ import annotations

import json
import re

import pytest

from dspy_adaptive.cli import main


def test_demo_writes_report_plots_program_and_library(tmp_path):
    out = tmp_path / "demo"
    main(["demo", "--out", str(out), "--actor-lm", "scripted", "--reflection-lm", "scripted", "--budget", "60",
          "--threads", "2"])
    report = (out / "report.md").read_text()
    assert "Test scores" in report and "Routing on test" in report and "Proposals by action" in report
    # the sandbox's measured isolation is in the run record and the report
    sandbox = json.loads((out / "search" / "run.json").read_text())["sandbox"]
    assert set(sandbox["requested"]) == {"rlimits", "uid", "landlock", "seccomp", "netns"}
    assert "## Sandbox" in report and "| landlock |" in report
    for png in ("learning_curve.png", "routing_heatmap.png", "lineage.png", "family_scores.png"):
        assert (out / png).stat().st_size > 5000, png
    assert json.loads((out / "routed.json").read_text())["library"]["router"]
    assert (out / "library" / "router.txt").exists()
    tests = json.loads((out / "test_results.json").read_text())
    assert {r["family"] for r in tests["optimized"]} == {"hotpotqa", "aime", "pupa", "livebench_if"}
    # a rerun resumes: nothing is re-evaluated and the report is rewritten
    before = (out / "search" / "state.json").read_text()
    main(["demo", "--out", str(out), "--actor-lm", "scripted", "--reflection-lm", "scripted", "--budget", "60"])
    assert json.loads((out / "search" / "state.json").read_text())["budget"] == json.loads(before)["budget"]


def scripted(out, *extra):
    main(["demo", "--out", str(out), "--actor-lm", "scripted", "--budget", "60", *extra])


def test_the_scripted_tour_accepts_an_edit_and_the_report_explains_it(tmp_path):
    out = tmp_path / "tour"
    scripted(out)
    report = (out / "report.md").read_text()
    assert "## What happened" in report and "## Proposals by outcome" in report
    accepted = [line for line in report.splitlines() if line.startswith("| accepted | - |")]
    assert accepted and int(accepted[0].split("|")[3]) >= 1, report      # the tour shows the accept path
    assert "repair calls" in report and "scripted tour" in report
    assert "paired requests (95% BCa bootstrap interval" in report or "is the seed itself" in report
    comparison = json.loads((out / "results.json").read_text())["test_comparison"]   # the protocol's statistics
    assert comparison is None or {"ci_low", "p_value", "effect_size", "wins"} <= set(comparison)
    for png in ("learning_curve.png", "routing_heatmap.png", "lineage.png", "family_scores.png"):
        assert f"]({png})" in report, png                               # every plot is linked
    assert "hotpotqa" not in report.split("## Search record")[0]       # friendly family names
    assert "multi-hop QA" in report
    # every role is named as it ran, with a wall time people can read (not "local", not "0.0 min")
    assert "Actor/router/judge: `scripted`; reflection: `scripted`" in report and "local" not in report.split("\n")[2]
    assert re.search(r"Wall time \d+\.\d s\.", report), report.split("\n")[2]
    # the tables list the families in the heat-map's order (alphabetical by their names)
    header = next(line for line in report.splitlines() if line.startswith("| program |"))
    names = [c.strip() for c in header.split("|")[2:-2]]
    assert names == sorted(names) == ["arithmetic", "constrained writing", "multi-hop QA", "private rewrite"]
    assert "## LM usage by role" in report and "| USD |" not in report          # scripted LMs: unpriced
    by_family = json.loads((out / "results.json").read_text())["test_comparison_by_family"]
    assert set(by_family) == {"aime", "hotpotqa", "pupa", "livebench_if"}
    assert all(g["n"] == 8 and {"ci_low", "ci_high", "p_value", "verdict"} <= set(g) for g in by_family.values())
    assert "## Test change per family (paired by request)" in report and "| multi-hop QA | 8 |" in report


def test_a_resumed_demo_keeps_its_wall_time_and_record(tmp_path):
    out = tmp_path / "demo"
    scripted(out)
    first = json.loads((out / "demo.json").read_text())
    schedule = json.loads((out / "search" / "run.json").read_text())["schedule"]
    assert first["sessions"] == 1 and first["wall_seconds"] > 0 and schedule
    scripted(out)
    second = json.loads((out / "demo.json").read_text())
    assert second["sessions"] == 2 and second["wall_seconds"] >= first["wall_seconds"]
    assert json.loads((out / "search" / "run.json").read_text())["schedule"] == schedule
    assert "over 2 sessions" in (out / "report.md").read_text()


def run_cli(args, code=""):
    import subprocess
    import sys
    prog = code + "from dspy_adaptive.cli import main; main(%r)" % (list(args),)
    return subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})


def test_ctrl_c_says_how_to_resume_without_a_traceback(tmp_path):
    proc = run_cli(["demo", "--out", str(tmp_path / "d"), "--actor-lm", "scripted"],
                   "import dspy_adaptive.demo.run as r\n"
                   "def stop(config): raise KeyboardInterrupt\n"
                   "r.run_demo = stop\n")
    assert proc.returncode == 130
    assert "interrupted — rerun the same command to resume" in proc.stderr and "Traceback" not in proc.stderr


def test_errors_name_the_option_the_user_typed(tmp_path):
    a_file = tmp_path / "report.txt"
    a_file.write_text("x")
    proc = run_cli(["demo", "--out", str(a_file), "--actor-lm", "scripted"])
    assert proc.returncode == 2 and f"--out {a_file} is a file" in proc.stderr and "Traceback" not in proc.stderr
    out = tmp_path / "demo"
    scripted(out)
    proc = run_cli(["demo", "--out", str(out), "--actor-lm", "scripted", "--budget", "60", "--max-specialists", "2"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"--out {out} holds a demo run made with other settings" in proc.stderr
    proc = run_cli(["demo", "--out", str(tmp_path / "x"), "--actor-lm", "local:/no/such.gguf"])
    assert proc.returncode == 2 and "--actor-lm local:/no/such.gguf: no GGUF file" in proc.stderr
    proc = run_cli(["demo", "--out", str(tmp_path / "x"), "--budget", "0"])
    assert proc.returncode == 2 and "--budget must be at least 1" in proc.stderr
    proc = run_cli(["demo", "--out", str(tmp_path / "y"), "--actor-lm", "scripted", "--reflection-lm", "openai/gpt-4.1",
                    "--judge-lm", "foo/bar"])      # options the scripted tour would drop silently
    assert proc.returncode == 2 and "--reflection-lm openai/gpt-4.1 and --judge-lm foo/bar would not be used" \
        in proc.stderr and not (tmp_path / "y").exists()


def test_demo_help_documents_the_command():
    proc = run_cli(["demo", "--help"])
    assert proc.returncode == 0
    for words in ("Ctrl-C", "SIGTERM", "resume", "report.md", "--proposal-format", "tour of the accept path",
                  "notebooks/explore_run"):
        assert words in proc.stdout, words


def test_the_demo_can_serve_with_a_distilled_router(tmp_path):
    out = tmp_path / "distilled"
    scripted(out, "--distill-router", "--budget", "96")
    record = json.loads((out / "search" / "run.json").read_text())["distilled_router"]
    assert record["built"], record
    saved = json.loads((out / "routed.json").read_text())
    assert saved["distilled_router"]["format"] == "dspy_adaptive.distilled_router"     # saved with the program
    assert (out / "library" / "distilled_router.json").exists()
    report = (out / "report.md").read_text()
    assert "## Distilled router" in report and "share still calling the LM router" in report
    tests = json.loads((out / "test_results.json").read_text())
    assert tests["optimized_hash"].endswith("+distilled")
    # a rerun without it leaves nothing that describes the distilled router it no longer serves with
    scripted(out, "--budget", "96")
    for library in (out / "library", out / "search" / "best_library"):
        assert (library / "router.txt").exists()
        assert not (library / "distilled_router.json").exists() and not (library / "distilled_router.txt").exists()
    assert "distilled_router" not in json.loads((out / "routed.json").read_text())
    assert "## Distilled router" not in (out / "report.md").read_text()


def test_load_run_opens_the_search_of_a_demo_out_folder(tmp_path):
    from dspy_adaptive import load_run

    out = tmp_path / "demo"
    scripted(out)
    assert load_run(out).to_dict() == load_run(out / "search").to_dict()
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "run.json").write_text((out / "search" / "run.json").read_text())
    with pytest.raises(FileNotFoundError, match=r"the log_dir of a finished run .*run.json is in '.*runs/a': pass"):
        load_run(tmp_path / "runs")


GATED = """import os, time, dspy_adaptive.demo.run as r
real = r.evaluate_on
def gated(*a, **k):
    print('TESTING', flush=True)
    while not os.path.exists({go!r}):
        time.sleep(0.05)
    return real(*a, **k)
r.evaluate_on = gated
from dspy_adaptive.cli import main; main({args!r})
"""


def test_a_second_demo_into_the_same_out_is_refused_at_once_and_the_first_loses_nothing(tmp_path):
    import os
    import subprocess
    import sys

    out, go = tmp_path / "demo", tmp_path / "go"
    args = ["demo", "--out", str(out), "--actor-lm", "scripted", "--budget", "60"]
    first = subprocess.Popen([sys.executable, "-c", GATED.format(go=str(go), args=args)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    try:
        for line in first.stdout:                 # the first demo is mid-run: searched, now testing
            if "TESTING" in line:
                break
        evals = (out / "search" / "evals.jsonl").read_text()
        second = run_cli(args)
        assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr
        assert f"--out {str(out)!r} is in use by another demo run (pid {first.pid} on " in second.stderr
        assert "Wait for that run to end" in second.stderr and "use another --out" in second.stderr
        assert "[demo]" not in second.stdout                               # it did not start
        assert (out / "search" / "evals.jsonl").read_text() == evals       # nor score anything
    finally:
        go.touch()
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    spent = json.loads((out / "search" / "run.json").read_text())["budget"]["spent"]
    assert len((out / "search" / "evals.jsonl").read_text().splitlines()) == spent      # each call logged once
    assert json.loads((out / "demo.json").read_text())["sessions"] == 1


def test_a_demo_whose_search_folder_another_run_holds_is_refused_and_not_counted(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "demo"
    scripted(out)
    before = (out / "demo.json").read_text()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from dspy_adaptive.search.checkpoint import DirLock\n"
                               "lock = DirLock.acquire(sys.argv[1], what='search')\n"
                               "print('locked', flush=True); time.sleep(600)", str(out / "search")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = run_cli(["demo", "--out", str(out), "--actor-lm", "scripted", "--budget", "60"])
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"log_dir {str(out / 'search')!r} is in use by another search (pid {holder.pid} on " in proc.stderr
    assert (out / "demo.json").read_text() == before                     # not a session
    scripted(out)                                                        # the holder was killed: free again
    assert json.loads((out / "demo.json").read_text())["sessions"] == 2


def test_a_refused_rerun_says_what_differs_and_is_not_counted(tmp_path):
    out = tmp_path / "demo"
    scripted(out)
    before = json.loads((out / "demo.json").read_text())
    proc = run_cli(["demo", "--out", str(out), "--actor-lm", "scripted", "--budget", "60", "--max-specialists", "2"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "What differs:" in proc.stderr and "max_specialists: was 4, now 2" in proc.stderr, proc.stderr
    assert "[demo] resuming" not in proc.stdout                          # it never said it resumed
    assert json.loads((out / "demo.json").read_text()) == before          # not a session, no time added


def test_sigterm_stops_like_ctrl_c_and_its_wall_time_is_recorded(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "d"
    code = ("import time, dspy_adaptive.demo.run as r\n"
            "def slow(*a, **k):\n    print('TESTING', flush=True); time.sleep(60)\n"
            "r.evaluate_on = slow\n"
            "from dspy_adaptive.cli import main; main(%r)" % (["demo", "--out", str(out), "--actor-lm", "scripted",
                                                              "--budget", "60"],))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    for line in proc.stdout:                      # the search is done; the test phase is running
        if "TESTING" in line:
            break
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM) — rerun the same command to resume" in err and "Traceback" not in err
    clock = json.loads((out / "demo.json").read_text())
    assert clock["sessions"] == 1 and clock["wall_seconds"] > 0.5
    assert (out / "search" / "state.json").exists()                      # the search record is kept


def test_the_wall_clock_survives_a_kill_and_a_slow_refusal_leaves_no_trace(tmp_path):
    import time

    from dspy_adaptive.demo.run import WallClock

    clock = WallClock(tmp_path)
    clock.keep_saving(every=0.05)
    time.sleep(0.3)                                   # SIGKILL now: the time so far is on disk
    assert json.loads((tmp_path / "demo.json").read_text())["sessions"] == 1
    clock.stop()
    refused = WallClock(tmp_path)
    before = (tmp_path / "demo.json").read_text()
    refused.keep_saving(every=0.05)
    time.sleep(0.2)                                   # a refusal that took a while, then...
    refused.forget()
    assert (tmp_path / "demo.json").read_text() == before


def test_the_report_says_what_a_local_model_can_show_in_the_roles_it_plays():
    from dspy_adaptive.demo.run import DemoConfig, local_model_note
    both = local_model_note(DemoConfig())
    assert "weak router and reflection model" in both and "benchmarks.local_models" in both
    hosted_router = local_model_note(DemoConfig(actor_lm="openai/gpt-4.1-mini"))
    assert "weak reflection model" in hosted_router and "As the router" not in hosted_router
    assert "As the router" in local_model_note(DemoConfig(reflection_lm="openai/gpt-4.1-mini"))
