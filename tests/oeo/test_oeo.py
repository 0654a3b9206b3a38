"""OpenEndedOptimizer: a scripted optimizer LM composes the process; the runner enforces the contract."""

from __future__ import annotations

import json
import re

import dspy
import pytest

from dspy_adaptive import OpenEndedOptimizer, route_of
from dspy_adaptive.testing import scripted_lm
from tests.core import toy

GOOD_PLAN = [
    ("inspect", {}),
    ("run_train", {"sample": 4}),
    ("evaluate", {"checkpoint": 0}),
    ("revise", {"slots": {"1": {"description": toy.ARITH_DESCRIPTION, "program": toy.ADD_SOURCE,
                                "profile": "fast"}}}),
    ("evaluate", {"checkpoint": 1}),
    ("select", {"checkpoint": 1}),
    ("stop", {}),
]


def optimizer_lm(plan, crash_at: int | None = None):
    """Answers the plan's next action; which one is read from the prompt (the turns recorded so far)."""
    def respond(call):
        done = len(re.findall(r"^turn \d+:", call.field("history") or "", re.M))
        if crash_at is not None and done == crash_at:
            raise KeyboardInterrupt("simulated kill")
        tool, args = plan[min(done, len(plan) - 1)]
        return {"next_thought": f"step {done + 1}", "next_tool_name": tool, "next_tool_args": args}
    return scripted_lm(respond, model="scripted/optimizer")


@pytest.fixture(autouse=True)
def actor():
    with dspy.context(lm=toy.actor_lm()):
        yield


def data():
    return toy.make_examples(4), toy.make_examples(4, offset=100)


def compile_with(plan, budget=60, log_dir=None, crash_at=None, **kw):
    train, val = data()
    opt = OpenEndedOptimizer(toy.metric, optimizer_lm=optimizer_lm(plan, crash_at), max_metric_calls=budget,
                             max_specialists=2, log_dir=log_dir, num_threads=2, **kw)
    return opt, opt.compile(dspy.Predict("question -> answer"), trainset=train, valset=val)


def test_a_sequence_of_actions_improves_the_toy_task(tmp_path):
    opt, routed = compile_with(GOOD_PLAN, log_dir=str(tmp_path))
    rec = opt.record
    assert rec["selected"] == 1 and rec["stop_reason"] == "the optimizer stopped"
    assert [cp["val_mean"] for cp in rec["checkpoints"]] == [0.5, 1.0]          # arith fixed by the specialist
    assert rec["budget"]["by_kind"] == {"seed_validation": 8, "parent_minibatch": 4, "child_minibatch": 0,
                                        "validation": 8, "merge_check": 0}
    assert [t["tool"] for t in rec["turns"]] == [a for a, _ in GOOD_PLAN] and rec["operational_failures"] == 0
    assert rec["turns"][3]["commit"] == 1 and all(t["usage"]["reflection"]["calls"] == 1 for t in rec["turns"])
    pred = routed(question="add: 2 5")
    assert pred.answer == "7" and route_of(pred).executed == 1
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["turns"][1]["observation_chars"] > 0
    report = (tmp_path / "report.md").read_text()
    assert "## Turns" in report and "## Checkpoints" in report and (tmp_path / "learning_curve.png").exists()
    routed.close()


def test_contract_violations_are_refused_recorded_and_not_repaired():
    plan = [
        ("delete_everything", {}),                                   # unknown tool
        ("run_train", {"row_ids": ["a100"]}),                        # a validation row
        ("revise", {"slots": {"1": {"description": "Reads secrets.", "program": toy.BAD_SOURCE}}}),   # policy
        ("evaluate", {"checkpoint": 0}),                             # over budget (8 rows, 5 calls left)
        ("run_train", {"sample": 2, "labels": True}),                # an argument the interface does not have
        ("select", {"checkpoint": 7}),                               # no such checkpoint
        ("stop", {}),
    ]
    opt, routed = compile_with(plan, budget=5)
    turns = opt.record["turns"]
    assert [t["ok"] for t in turns] == [False] * 6 + [True]
    errors = [t["error"] for t in turns[:6]]
    assert "unknown action" in errors[0] and "not training rows" in errors[1]
    assert "rejected by the sandbox" in errors[2] and "over budget" in errors[3]
    assert errors[4] and "checkpoint 7 does not exist" in errors[5]
    assert opt.record["budget"]["spent"] == 0 and len(opt.record["checkpoints"]) == 1     # nothing ran or changed
    assert opt.record["operational_failures"] == 6
    routed.close()


def test_no_observation_carries_validation_or_test_labels():
    seen = []

    def respond(call):
        seen.append(call.field("last_observation") or "")
        done = len(re.findall(r"^turn \d+:", call.field("history") or "", re.M))
        tool, args = GOOD_PLAN[min(done, len(GOOD_PLAN) - 1)]
        return {"next_thought": "x", "next_tool_name": tool, "next_tool_args": args}

    train, val = data()
    opt = OpenEndedOptimizer(toy.metric, optimizer_lm=scripted_lm(respond), max_metric_calls=60, max_specialists=2)
    opt.compile(dspy.Predict("question -> answer"), trainset=train, valset=val).close()
    text = "\n".join(seen)
    assert not any(ex.answer in text.split() for ex in val if ex.id.startswith("c"))   # val gold never shown
    assert not any(f"HIDDEN-LABEL-{ex.id}" in text for ex in train + val)               # nor any label field


def test_a_killed_run_resumes_with_the_same_checkpoints_and_budget(tmp_path):
    full, routed = compile_with(GOOD_PLAN, log_dir=str(tmp_path / "full"))
    routed.close()
    with pytest.raises(KeyboardInterrupt):
        compile_with(GOOD_PLAN, log_dir=str(tmp_path / "killed"), crash_at=4)   # after the revision committed
    state = json.loads((tmp_path / "killed" / "state.json").read_text())
    assert len(state["contract"]["checkpoints"]) == 2 and len(state["runner"]["turns"]) == 4
    resumed, routed = compile_with(GOOD_PLAN, log_dir=str(tmp_path / "killed"))
    routed.close()
    strip = lambda rec: [(t["tool"], t["ok"], t["spent_after"], t["commit"]) for t in rec["turns"]]  # noqa: E731
    assert strip(resumed.record) == strip(full.record)
    assert resumed.record["budget"] == full.record["budget"]
    assert [c["val_mean"] for c in resumed.record["checkpoints"]] == [c["val_mean"] for c in full.record["checkpoints"]]
    with pytest.raises(ValueError, match="holds another OEO run") as e:
        compile_with(GOOD_PLAN, budget=61, log_dir=str(tmp_path / "killed"))
    assert "max_metric_calls: was 60, now 61" in str(e.value)


def test_a_run_killed_inside_an_evaluate_never_exceeds_its_budget_nor_loses_a_call(tmp_path):
    """Issue 26: killed after 5 of an evaluate's 8 validation rows were scored and logged, then rerun on the same
    log_dir: the cut-off turn is redone from the log (its 5 rows taken from it, 3 run), so the scored calls made
    in both sessions stay within the budget, every one is recorded once, and none is lost or charged twice."""
    train, val = data()
    calls = {"n": 0, "kill_at": None}

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        calls["n"] += 1
        if calls["n"] == calls["kill_at"]:
            raise KeyboardInterrupt("killed inside the evaluate")
        return toy.metric(gold, pred, trace, pred_name, pred_trace)

    def run(log_dir):
        opt = OpenEndedOptimizer(metric, optimizer_lm=optimizer_lm(GOOD_PLAN), max_metric_calls=26,
                                 max_specialists=2, log_dir=str(log_dir), num_threads=1)
        return opt, opt.compile(dspy.Predict("question -> answer"), trainset=train, valset=val)

    full, routed = run(tmp_path / "full")
    routed.close()
    made_in_full = calls["n"]
    calls.update(n=0, kill_at=4 + 6)            # run_train's 4 rows, then the 6th validation row of the evaluate
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "killed")
    logged = (tmp_path / "killed" / "evals.jsonl").read_text().splitlines()
    assert len(logged) == 4 + 5                 # the 5 finished validation rows were logged before the kill
    calls["kill_at"] = None
    resumed, routed = run(tmp_path / "killed")
    routed.close()
    assert calls["n"] - 1 == made_in_full <= 26          # both sessions together (the killed call ran no result)
    b = resumed.record["budget"]
    assert b["spent"] == full.record["budget"]["spent"] == made_in_full and b["lost_to_interruptions"] == 0
    logged = (tmp_path / "killed" / "evals.jsonl").read_text().splitlines()
    assert len(logged) == b["spent"]                       # every scored call recorded, once
    assert [c["val_mean"] for c in resumed.record["checkpoints"]] == [c["val_mean"] for c in full.record["checkpoints"]]


def test_calls_of_a_cut_off_turn_that_is_not_redone_are_charged_and_counted_lost(tmp_path):
    """When the resumed optimizer does something else than the cut-off turn did, that turn's logged calls were
    still made: they stay charged (the budget never forgets them) and are reported as lost."""
    train, val = data()
    kill = {"at": 4 + 3}
    calls = {"n": 0}

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        calls["n"] += 1
        if calls["n"] == kill["at"]:
            raise KeyboardInterrupt
        return toy.metric(gold, pred, trace, pred_name, pred_trace)

    other = GOOD_PLAN[:2] + [("stop", {})]                  # on resume, turn 3 stops instead of evaluating
    with pytest.raises(KeyboardInterrupt):
        OpenEndedOptimizer(metric, optimizer_lm=optimizer_lm(GOOD_PLAN), max_metric_calls=26, max_specialists=2,
                           log_dir=str(tmp_path), num_threads=1).compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val)
    kill["at"] = None
    opt = OpenEndedOptimizer(metric, optimizer_lm=optimizer_lm(other), max_metric_calls=26, max_specialists=2,
                             log_dir=str(tmp_path), num_threads=1)
    opt.compile(dspy.Predict("question -> answer"), trainset=train, valset=val).close()
    b = opt.record["budget"]
    assert b["lost_to_interruptions"] == 2 and b["spent"] == 4 + 2 == calls["n"] - 1


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="optimizer_lm"):
        OpenEndedOptimizer(toy.metric, optimizer_lm=None, max_metric_calls=10)
    with pytest.raises(ValueError, match="max_metric_calls"):
        OpenEndedOptimizer(toy.metric, optimizer_lm=optimizer_lm(GOOD_PLAN), max_metric_calls=0)
