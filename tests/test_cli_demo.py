"""The demo main job end to end with scripted LMs (the real run uses the local GGUF model)."""

from __future__ import annotations

import json

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
