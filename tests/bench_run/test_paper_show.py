"""Issue 15 "Show it": a scripted benchmark run (benchmarks.skill_world) with the paper's merge schedule and
accounting. The run record shows merge checks, passes and validations; the budget total equals feedback +
full-validation + merge-check scores exactly (Appendix L: 14,455 validation + 3,648 feedback = 18,103)."""

from __future__ import annotations

import json

import pytest

from benchmarks import run as bench
from tests.conftest import SHARED_DATA

ARGS = ["--method", "adaptive", "--scripted", "skills", "--data", str(SHARED_DATA), "--sizes", "12,20,1",
        "--budget", "6000", "--num-threads", "4", "--no-progress", "--aime-attempts", "1", "--seed", "43"]


@pytest.fixture(scope="module")
def show(tmp_path_factory):
    out = tmp_path_factory.mktemp("show")
    bench.main(ARGS + ["--out", str(out)])
    return json.loads((out / "results.json").read_text()), json.loads((out / "search" / "run.json").read_text()), out


def test_merges_run_at_the_papers_schedule(show):
    results, run, out = show
    census = results["merge_census"]
    proposals = run["proposals"]
    merges = [p for p in proposals if p["kind"] == "merge"]
    assert census["checks"] == len(merges) > 5                    # not capped at 5 attempts any more
    assert census["passed"] == census["validated"] == sum(p["accepted"] for p in merges) >= 5
    assert all(len(p["minibatch"]) == 5 for p in merges)           # five-row checks
    assert sum(census["classes"].values()) == census["passed"] and census["classes"]["pairs_from_both"] >= 1
    # cadence 1: a merge is tried only after an accepted reflective proposal since the previous attempt
    last = -1
    for i, p in enumerate(proposals):
        if p["kind"] == "merge":
            assert any(q["kind"] == "reflect" and q["accepted"] for q in proposals[last + 1:i])
            last = i
    text = (out / "tables.md").read_text()
    assert "Merges and budget accounting" in text and "Accepted merges by Table 10 class" in text


def test_budget_total_is_feedback_plus_validation_plus_merge_checks_exactly(show):
    results, run, _ = show
    by_kind = run["budget"]["by_kind"]
    acc = results["accounting"]
    n_val = len(run["val_subscores"][0])
    assert by_kind["merge_check"] == 5 * results["merge_census"]["checks"] == acc["merge_check"]
    # every archived candidate, the seed included, was fully validated once and charged for every row
    full = by_kind["seed_validation"] + by_kind["validation"]
    assert acc["full_validation"] == full == len(run["candidates"]) * n_val
    assert acc["feedback"] == by_kind["parent_minibatch"] + by_kind["child_minibatch"]
    assert acc["total"] == acc["feedback"] + acc["full_validation"] + acc["merge_check"]
    assert acc["total"] == run["budget"]["spent"] == results["budget"]["used"]
    assert acc["validation"] == acc["full_validation"] + acc["merge_check"]


def test_preset_paper_sets_the_papers_configuration_and_explicit_flags_win():
    args = bench.parse_args(["--preset", "paper", "--method", "adaptive", "--out", "x"])
    assert (args.budget, args.seed, args.minibatch_size, args.max_specialists, args.aime_attempts) == \
        (18000, 43, 24, 5, 5)
    assert (args.merge_cadence, args.merge_cap_counts, args.merge_parent_copies, args.reuse_scores,
            args.max_concurrent_proposals) == (1, "accepted", "measure", False, 1)
    assert bench.parse_args(["--preset", "paper", "--budget", "900"]).budget == 900


def test_preset_paper_runs_without_repairs_gates_unusable_programs_caps_candidates_and_sets_the_judge():
    """Issue 27 item 4: two reflection calls per proposal (no repair), what they produced goes to the gate,
    candidates cap at 100, the judge's settings set explicitly, all recorded in results.json."""
    args = bench.parse_args(["--preset", "paper", "--method", "adaptive", "--out", "x"])
    assert (args.max_repair_attempts, args.unusable_programs, args.max_candidates, args.judge_settings) == \
        (0, "gate", 100, "fast")
    assert bench.parse_args(["--preset", "paper", "--max-repair-attempts", "2"]).max_repair_attempts == 2
    plain = bench.parse_args(["--method", "adaptive", "--out", "x"])
    assert (plain.max_repair_attempts, plain.unusable_programs, plain.max_candidates, plain.judge_settings) == \
        (1, "reject", None, "server")


def test_the_judge_runs_with_explicit_settings_and_results_say_which():
    import dspy
    args = bench.parse_args(["--preset", "paper"])
    judge = bench.judge_lm(dspy.LM("hosted_vllm/Qwen/Qwen3-8B"), args)
    assert judge.kwargs["temperature"] == 0.3 and judge.kwargs["max_tokens"] == 4096
    assert judge.kwargs["extra_body"]["chat_template_kwargs"]["enable_thinking"] is False
    record = bench.judge_record(judge, args)
    assert (record["settings"], record["temperature"], record["thinking"]) == ("fast", 0.3, False)
    lm = dspy.LM("hosted_vllm/Qwen/Qwen3-8B")
    assert bench.judge_lm(lm, bench.parse_args([])) is lm                        # default: as given
    assert bench.judge_record(lm, bench.parse_args([]))["note"].startswith("server defaults")


def test_a_paper_preset_run_records_its_configuration(tmp_path):
    out = tmp_path / "paper"
    bench.main(["--preset", "paper", "--method", "adaptive", "--scripted", "--data", str(SHARED_DATA),
                "--sizes", "2,2,1", "--budget", "300", "--max-candidates", "3", "--num-threads", "2",
                "--no-progress", "--aime-attempts", "1", "--out", str(out)])
    res = json.loads((out / "results.json").read_text())
    cfg = res["config"]
    assert (cfg["max_repair_attempts"], cfg["unusable_programs"], cfg["max_candidates"], cfg["judge_settings"]) == \
        (0, "gate", 3, "fast")
    assert res["judge"]["settings"] == "fast" and res["judge"]["temperature"] == 0.3
    run = json.loads((out / "search" / "run.json").read_text())
    assert len(run["candidates"]) <= 3
    attempts = [a for p in run["proposals"] if p["kind"] == "reflect" for a in p["details"].get("attempts", [])]
    assert attempts and all(a["attempt"] == 0 for a in attempts)                 # never a repair call
