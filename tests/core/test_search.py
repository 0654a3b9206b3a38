"""AdaptiveGEPA's search on the scripted two-family toy task (no network, no real LM)."""

from __future__ import annotations

import json

import dspy
import pytest

from dspy_adaptive import AdaptiveGEPA, route_of
from dspy_adaptive.search.checkpoint import ResumeMismatchError
from tests.core import toy


def optimizer(reflection, **kw):
    # the toy reflection writes source: these tests follow the code path ("auto" would turn structured after
    # two rejected code proposals, which test_proposal_format_auto covers)
    params = dict(reflection_lm=reflection, max_metric_calls=60, reflection_minibatch_size=4, seed=3,
                  use_merge=False, track_stats=True, progress=False, proposal_format="code")
    params.update(kw)
    return AdaptiveGEPA(toy.metric, **params)


@pytest.fixture
def data():
    return toy.make_examples(4), toy.make_examples(4, offset=100)


@pytest.fixture(autouse=True)
def actor():
    lm = toy.actor_lm()
    with dspy.context(lm=lm):
        yield lm


def test_activation_is_gated_archived_and_routes_the_failing_family(data):
    train, val = data
    routed = optimizer(toy.reflection_lm()).compile(dspy.Predict("question -> answer"), trainset=train, valset=val)
    res = routed.detailed_results
    assert res.val_aggregate_scores[0] == pytest.approx(0.5)       # seed: caps right, arith wrong
    assert max(res.val_aggregate_scores) == pytest.approx(1.0)
    best = res.best_library
    assert best.active_ids() == (1,) and best.slot(1).description == toy.ARITH_DESCRIPTION
    assert res.best_candidate.library == best            # dspy.GEPA's shape: candidates are programs
    accepted = [p for p in res.proposals if p["accepted"]]
    assert accepted and accepted[0]["action"] == "activate" and accepted[0]["child_sum"] > accepted[0]["parent_sum"]
    # the returned program routes the arith family to the new slot and the rest to the fallback
    pred = routed(question="add: 20 22")
    assert pred.answer == "42" and route_of(pred).executed == 1
    pred = routed(question="upper: xyz")
    assert pred.answer == "XYZ" and route_of(pred).executed == 0
    # footprints are recorded per validation row id
    assert {rid for rid, k in res.executed[res.best_idx].items() if k == 1} == {e.id for e in val if e.id[0] == "a"}


def test_worse_child_is_rejected_at_the_gate_and_never_validated(data):
    train, val = data
    routed = optimizer(toy.reflection_lm(program_source=toy.WRONG_SOURCE),
                       max_metric_calls=40).compile(dspy.Predict("question -> answer"), trainset=train, valset=val)
    res = routed.detailed_results
    assert len(res.candidates) == 1                     # only the seed
    assert res.budget["by_kind"]["validation"] == 0     # no child was paid a validation pass
    reflect = [p for p in res.proposals if p["kind"] == "reflect"]
    assert reflect and not any(p["accepted"] for p in reflect)
    assert all(p["child_sum"] <= p["parent_sum"] for p in reflect)
    assert res.action_counts["activate"]["accepted"] == 0 and res.action_counts["activate"]["proposed"] == len(reflect)


def test_budget_rule_and_counts_add_up(data):
    train, val = data
    budget = 37
    res = optimizer(toy.reflection_lm(program_source=toy.WRONG_SOURCE, vary=True), max_metric_calls=budget).compile(
        dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
    assert sum(res.budget["by_kind"].values()) == res.budget["spent"]
    # every proposal started while spent < budget
    starts = [res.budget["by_kind"]["seed_validation"]] + [p["budget_at"] for p in res.proposals[:-1]]
    assert all(s < budget for s in starts)
    assert res.budget["spent"] >= budget
    per_iteration_max = 2 * 4 + len(val)               # parent + child minibatch + one validation
    assert res.budget["overshoot"] <= per_iteration_max


def test_with_reuse_scores_an_unchanged_candidate_is_never_recharged(data):
    train, val = data
    res = optimizer(toy.reflection_lm(program_source=toy.WRONG_SOURCE), max_metric_calls=60,
                    reflection_minibatch_size=8, reuse_scores=True).compile(
        dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
    # the seed is the only parent; after its first minibatch over all 8 train rows it is fully cached
    assert res.budget["by_kind"]["parent_minibatch"] == len(train)


def test_by_default_every_scoring_invocation_is_executed_and_charged(data):
    """Issue 15 item 3: the paper's accounting. The same parent on the same minibatch is re-run and
    charged every iteration, and the total is exactly the sum of what each proposal spent."""
    train, val = data
    res = optimizer(toy.reflection_lm(program_source=toy.WRONG_SOURCE), max_metric_calls=60,
                    reflection_minibatch_size=8).compile(dspy.Predict("question -> answer"), trainset=train,
                                                         valset=val).detailed_results
    reflective = [p for p in res.proposals if p["kind"] in ("reflect", "skip")]
    assert len(reflective) >= 3
    assert res.budget["by_kind"]["parent_minibatch"] == len(reflective) * len(train)
    by_kind = res.budget["by_kind"]
    assert res.total_metric_calls == sum(by_kind.values())
    assert by_kind["seed_validation"] == len(val)


def test_reflection_never_sees_validation_rows_or_labels(data):
    train, val = data
    refl = toy.reflection_lm()
    optimizer(refl).compile(dspy.Predict("question -> answer"), trainset=train, valset=val)
    prompts = refl.scripted.prompts()
    assert prompts
    for p in prompts:
        for ex in val:
            assert ex.question not in p
        assert "arith-label" not in p and "caps-label" not in p
        assert "HIDDEN-LABEL" not in p          # no label field of any example reaches reflection


def test_action_selection_and_program_rewrite_respect_table6(data):
    train, val = data
    sibling_marker = "SIBLING_SECRET_MARKER"
    from dspy_adaptive.data import make_rows
    from dspy_adaptive.program.library import Library, Slot
    from dspy_adaptive.reflection.propose import Reflector
    from dspy_adaptive.schema import RowResult

    lib = (Library.empty(3)
           .with_slot(1, Slot().activated(toy.ARITH_DESCRIPTION, toy.ADD_SOURCE, "fast"))
           .with_slot(2, Slot().activated("Other things", toy.WRONG_SOURCE.replace("nope", sibling_marker), "deep")))
    refl = toy.reflection_lm(action="rewrite_program", slot="1")
    reflector = Reflector(refl, input_names=("question",), output_names=("answer",))
    rows = list(make_rows(train, "trainset"))[:2]
    results = [RowResult(r.id, 0.0, "wrong", {"answer": "x"}, 1, 1, None, None, ()) for r in rows]
    edit = reflector.propose(lib, rows, results)
    assert not edit.rejected and edit.action == "rewrite_program" and edit.slot == 1
    select_prompt, rewrite_prompt = refl.scripted.prompts()
    assert "class Adder" not in select_prompt and sibling_marker not in select_prompt   # no source at all
    assert "class Adder" in rewrite_prompt                                             # its own source
    assert sibling_marker not in rewrite_prompt and "Other things" not in rewrite_prompt  # no siblings


def test_program_rewrite_reads_no_sibling_description_through_a_real_routed_trace(data, actor):
    """Issue 15 item 5: records from a real RoutedProgram run (Evaluator -> score_example with DSPy's
    trace) hold the router's call, whose input lists every active description. The action selector may
    read them; the program rewrite of slot 1 must not see slot 2's description anywhere."""
    train, _ = data
    from dspy_adaptive.data import make_rows
    from dspy_adaptive.program.library import Library, Slot
    from dspy_adaptive.program.routed import RoutedProgram
    from dspy_adaptive.reflection.propose import Reflector
    from dspy_adaptive.reflection.traces import render_traces
    from dspy_adaptive.search.budget import Budget
    from dspy_adaptive.search.evaluate import Evaluator

    sibling = "Sibling duties: requests about poems and other things"
    lib = (Library.empty(3)
           .with_slot(1, Slot().activated(toy.ARITH_DESCRIPTION, toy.WRONG_SOURCE, "fast"))
           .with_slot(2, Slot().activated(sibling, toy.WRONG_SOURCE, "deep")))
    rows = list(make_rows(train, "trainset"))[:4]
    evaluator = Evaluator(RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=actor, deep_lm=actor),
                          toy.metric, Budget(100))
    results = evaluator.evaluate(lib, rows, "parent_minibatch")
    assert any(s["predictor"] == "router" for r in results for s in r.steps)
    assert sibling in render_traces(rows, results)          # the raw trace does carry the sibling's description
    refl = toy.reflection_lm(action="rewrite_program", slot="1")
    edit = Reflector(refl, input_names=("question",), output_names=("answer",)).propose(lib, rows, results)
    assert not edit.rejected and edit.action == "rewrite_program" and edit.slot == 1
    select_prompt, rewrite_prompt = refl.scripted.prompts()
    assert sibling in select_prompt                          # action selection reads all descriptions
    assert sibling not in rewrite_prompt and "Sibling duties" not in rewrite_prompt
    assert toy.ARITH_DESCRIPTION in rewrite_prompt and "class Wrong" in rewrite_prompt   # its own pair
    assert "router" in rewrite_prompt and "withheld" in rewrite_prompt                # the route stays visible


@pytest.mark.parametrize("kind", ["malformed", "impossible_target", "sandbox_rejected"])
def test_bad_reflections_are_recorded_rejections(data, kind):
    train, val = data
    refl = {"malformed": toy.reflection_lm(action="make it better"),
            "impossible_target": toy.reflection_lm(action="rewrite_program", slot="2"),
            "sandbox_rejected": toy.reflection_lm(program_source=toy.BAD_SOURCE)}[kind]
    res = optimizer(refl, max_metric_calls=30).compile(dspy.Predict("question -> answer"), trainset=train,
                                                       valset=val).detailed_results
    reflect = [p for p in res.proposals if p["kind"] == "reflect"]
    assert reflect and all(not p["accepted"] and p["reason"] for p in reflect)
    expected = {"malformed": "could not be read", "impossible_target": "not active",
                "sandbox_rejected": "rejected by the sandbox"}[kind]
    assert all(expected in p["reason"] for p in reflect)
    failure = {"malformed": "unparseable", "impossible_target": "invalid_target",
               "sandbox_rejected": "sandbox_rejected"}[kind]
    assert {p["failure"] for p in reflect} == {failure}                  # reports count this typed field
    assert res.faults["failed_reflections"] == 0       # the LM answered every time: its answers were unusable
    assert all(len(p["details"]["attempts"]) >= 2 for p in reflect)   # each was repaired once (the default)
    if kind == "sandbox_rejected":
        assert "os" in reflect[0]["reason"]
        assert "import os" in reflect[0]["details"]["rejected_source"]   # kept for people reading the run
    assert len(res.candidates) == 1


def test_rejection_reason_reaches_the_next_reflection(data):
    train, val = data
    refl = toy.reflection_lm(program_source=toy.BAD_SOURCE)
    optimizer(refl, max_metric_calls=30).compile(dspy.Predict("question -> answer"), trainset=train, valset=val)
    select_prompts = [c.prompt for c in refl.scripted.calls if "action" in c.output_fields]
    assert len(select_prompts) >= 2
    assert "rejected by the sandbox" in select_prompts[1]


def _archive_fingerprint(res):
    budget = {k: v for k, v in res.budget.items() if k != "lost_to_interruptions"}
    return json.dumps({"libs": [c.content_hash for c in res.libraries], "scores": res.val_subscores,
                       "parents": res.parents, "budget": budget,
                       "proposals": [(p["action"], p["accepted"], p["minibatch"]) for p in res.proposals]},
                      sort_keys=True)


def test_num_threads_does_not_change_results(data):
    train, val = data
    one = optimizer(toy.reflection_lm(), num_threads=1).compile(
        dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
    four = optimizer(toy.reflection_lm(), num_threads=4).compile(
        dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
    assert _archive_fingerprint(one) == _archive_fingerprint(four)


def test_interrupted_run_resumes_to_the_same_archive(data, tmp_path):
    train, val = data
    program = dspy.Predict("question -> answer")
    full = optimizer(toy.reflection_lm(program_source=toy.WRONG_SOURCE, vary=True), max_metric_calls=80,
                     log_dir=str(tmp_path / "full")).compile(program, trainset=train, valset=val).detailed_results
    crashing = toy.reflection_lm(program_source=toy.WRONG_SOURCE, fail_after=5, vary=True)
    with pytest.raises(KeyboardInterrupt):
        optimizer(crashing, max_metric_calls=80, log_dir=str(tmp_path / "resumed")).compile(
            program, trainset=train, valset=val)
    state = json.loads((tmp_path / "resumed" / "state.json").read_text())
    assert state["iteration"] >= 1
    resumed = optimizer(toy.reflection_lm(program_source=toy.WRONG_SOURCE, vary=True), max_metric_calls=80,
                        log_dir=str(tmp_path / "resumed")).compile(program, trainset=train,
                                                                     valset=val).detailed_results
    assert _archive_fingerprint(resumed) == _archive_fingerprint(full)
    assert resumed.budget["by_kind"]["seed_validation"] == len(val)   # the seed was not re-charged
    # the crashed iteration's scored calls were kept: its redo took them from the log instead of running
    # them again, so nothing was lost and every scored call was logged (and charged) exactly once
    assert resumed.budget["lost_to_interruptions"] == 0
    logged = (tmp_path / "resumed" / "evals.jsonl").read_text().splitlines()
    assert len(logged) == resumed.budget["spent"] == full.budget["spent"]


def _router_calls(lm) -> int:
    return sum(1 for c in lm.scripted.calls if "slot" in c.output_fields)


def test_a_resumed_run_does_not_ask_the_router_again_for_what_it_learnt(data, tmp_path):
    """The router decisions of the interrupted session come back from routes.jsonl (the actor here has DSPy's
    cache off, as a user's can): the two sessions together make the uninterrupted run's router calls, and
    the resumed run reaches the same archive."""
    train, val = data
    program = dspy.Predict("question -> answer")

    def run(reflection, log_dir):
        lm = toy.actor_lm()
        with dspy.context(lm=lm):
            try:
                res = optimizer(reflection, max_metric_calls=80, log_dir=str(log_dir)).compile(
                    program, trainset=train, valset=val).detailed_results
            except KeyboardInterrupt:
                res = None
        return res, _router_calls(lm)

    full, full_calls = run(toy.reflection_lm(program_source=toy.WRONG_SOURCE, vary=True), tmp_path / "full")
    cut, first = run(toy.reflection_lm(program_source=toy.WRONG_SOURCE, fail_after=5, vary=True), tmp_path / "r")
    assert cut is None and first > 0
    logged = (tmp_path / "r" / "routes.jsonl").read_text().splitlines()
    assert len(logged) == first                       # every decision the first session paid for is kept
    resumed, second = run(toy.reflection_lm(program_source=toy.WRONG_SOURCE, vary=True), tmp_path / "r")
    assert _archive_fingerprint(resumed) == _archive_fingerprint(full)
    assert first + second == full_calls, (first, second, full_calls)
    with open(tmp_path / "r" / "routes.jsonl", "a") as f:     # a torn last line (a kill mid-append) is dropped
        f.write('{"key": ["a", "b"')
    again, third = run(toy.reflection_lm(program_source=toy.WRONG_SOURCE, vary=True), tmp_path / "r")
    assert third == 0 and not (tmp_path / "r" / "routes.jsonl").read_text().endswith('"b"')


def test_resume_refuses_a_different_configuration(data, tmp_path):
    train, val = data
    optimizer(toy.reflection_lm(), max_metric_calls=30, log_dir=str(tmp_path)).compile(
        dspy.Predict("question -> answer"), trainset=train, valset=val)
    with pytest.raises(ResumeMismatchError, match="holds another search") as e:
        optimizer(toy.reflection_lm(), max_metric_calls=30, log_dir=str(tmp_path), seed=99).compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val)
    assert "search.seed: was 3, now 99" in str(e.value) and "new log_dir" in str(e.value)   # what and what to do


def test_run_record_files(data, tmp_path):
    train, val = data
    optimizer(toy.reflection_lm(), log_dir=str(tmp_path)).compile(
        dspy.Predict("question -> answer"), trainset=train, valset=val)
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["action_counts"]["activate"]["accepted"] >= 1
    assert run["usage"]["reflection"]["calls"] >= 2 and run["usage"]["router"]["calls"] >= 1
    assert run["usage"]["fallback"]["prompt_tokens"] > 0
    report = (tmp_path / "report.md").read_text()
    assert "Proposals by action" in report and toy.ARITH_DESCRIPTION in report
    assert (tmp_path / "learning_curve.png").stat().st_size > 1000


def test_resume_refuses_a_state_of_another_version(data, tmp_path):
    train, val = data
    optimizer(toy.reflection_lm(), max_metric_calls=30, log_dir=str(tmp_path)).compile(
        dspy.Predict("question -> answer"), trainset=train, valset=val)
    state = json.loads((tmp_path / "state.json").read_text())
    (tmp_path / "state.json").write_text(json.dumps(dict(state, version=99)))
    with pytest.raises(ResumeMismatchError, match="layout version 99, but this dspy_adaptive reads version 2"):
        optimizer(toy.reflection_lm(), max_metric_calls=30, log_dir=str(tmp_path)).compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val)


def test_the_result_is_built_from_the_saved_state(data, tmp_path):
    from dspy_adaptive.record.run_record import AdaptiveGEPAResult
    from dspy_adaptive.schema import RowResult

    train, val = data
    res = optimizer(toy.reflection_lm(), log_dir=str(tmp_path)).compile(
        dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
    state = json.loads((tmp_path / "state.json").read_text())
    evals = [RowResult.from_dict(json.loads(line)["result"]) for line in open(tmp_path / "evals.jsonl")]
    again = AdaptiveGEPAResult.from_state(state, row_results=evals, schedule=res.schedule, log_dir=str(tmp_path),
                                          sandbox=res.run.sandbox)
    assert again == res.run and res.run.sandbox["requested"]   # the run record behind detailed_results


def test_an_interrupted_seed_validation_resumes_row_by_row(data, tmp_path):
    """Ctrl-C during the seed validation loses nothing: the rows already scored are kept, charged once, and
    not run again; the finished run equals an uninterrupted one."""
    train, val = data
    program = dspy.Predict("question -> answer")
    calls = {"n": 0, "stop_at": None}

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        calls["n"] += 1
        if calls["stop_at"] is not None and calls["n"] == calls["stop_at"]:
            raise KeyboardInterrupt
        return toy.metric(gold, pred, trace, pred_name, pred_trace)

    def run(log_dir, **kw):
        return AdaptiveGEPA(metric, reflection_lm=toy.reflection_lm(program_source=toy.WRONG_SOURCE, vary=True),
                            max_metric_calls=60, reflection_minibatch_size=4, seed=3, use_merge=False,
                            track_stats=True, progress=False, num_threads=1, log_dir=str(log_dir),
                            **kw).compile(program, trainset=train, valset=val).detailed_results

    full = run(tmp_path / "full")
    calls.update(n=0, stop_at=6)                      # the 6th seed row is interrupted: 5 are done
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "resumed")
    assert not (tmp_path / "resumed" / "state.json").exists()
    calls.update(n=0, stop_at=None)
    resumed = run(tmp_path / "resumed")
    assert resumed.budget["by_kind"]["seed_validation"] == len(val)       # charged once per row
    assert _archive_fingerprint(resumed) == _archive_fingerprint(full)
    assert resumed.val_aggregate_scores == full.val_aggregate_scores
    assert calls["n"] == full.total_metric_calls - 5                     # the 5 done rows were not re-run
    assert json.loads((tmp_path / "resumed" / "run.json").read_text())["schedule"]   # the schedule is kept


def test_a_different_run_in_the_same_log_dir_is_refused_before_it_scores_anything(data, tmp_path):
    train, val = data
    calls = {"n": 0}

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return toy.metric(gold, pred, trace, pred_name, pred_trace)

    with pytest.raises(KeyboardInterrupt):
        AdaptiveGEPA(metric, reflection_lm=toy.reflection_lm(), max_metric_calls=30, num_threads=1, progress=False,
                     log_dir=str(tmp_path)).compile(dspy.Predict("question -> answer"), trainset=train, valset=val)
    before = (tmp_path / "evals.jsonl").read_text()
    assert len(before.splitlines()) == 3                           # the interrupted run's three scored rows
    with pytest.raises(ResumeMismatchError) as e:                   # another metric and seed: not mixed in
        optimizer(toy.reflection_lm(), max_metric_calls=30, log_dir=str(tmp_path), seed=99).compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val)
    assert "metric: was" in str(e.value) and "search.seed" in str(e.value)
    assert (tmp_path / "evals.jsonl").read_text() == before         # nothing of the old run is lost


def test_a_rerun_with_a_smaller_budget_than_an_earlier_session_ends_without_an_overshoot(data, tmp_path):
    """Raising the budget (a rerun with more calls) and then rerunning the original command: the run already spent
    more than the original budget, but within what a session allowed -- it ends at once, spending nothing, and its
    record measures the calls against the largest budget it was given (no false overshoot)."""
    train, val = data
    program, log_dir = dspy.Predict("question -> answer"), str(tmp_path / "run")

    def run(calls):
        return optimizer(toy.reflection_lm(program_source=toy.WRONG_SOURCE, vary=True), max_metric_calls=calls,
                         log_dir=log_dir).compile(program, trainset=train, valset=val).detailed_results

    first = run(40)
    raised = run(80)
    assert raised.budget["spent"] > 40
    again = run(40)
    assert again.budget["spent"] == raised.budget["spent"]                      # nothing more was spent
    assert again.budget["max"] == 80 and again.budget["overshoot"] == raised.budget["overshoot"] <= 80 // 4
    assert again.budget["this_session"] == 40
    report = (tmp_path / "run" / "report.md").read_text()
    assert f"{again.budget['spent']} of 80" in report
    assert first.budget["max"] == 40
