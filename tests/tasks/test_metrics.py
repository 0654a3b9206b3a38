"""Feedback metrics on real samples, with scripted judge LMs (offline)."""

import re

import dspy
import pytest

from benchmarks.data import load_family, load_mixture
from dspy_adaptive.tasks.metrics import (
    AIMEMetric,
    HotpotQAMetric,
    LiveBenchIFMetric,
    MixtureMetric,
    PupaMetric,
    aime_pass_at_1,
    f1_score,
    normalize_answer,
    parse_integer_answer,
    strip_thinking,
)
from dspy_adaptive.tasks.programs import SeedProgram
from dspy_adaptive.testing import ScriptedEngine, scripted_lm


def hotpot_all(shared_data):
    s = load_family("hotpotqa", data_dir=shared_data)
    return s.train + s.val + s.test


def contains_answer(feedback: str, answer: str) -> bool:
    f, a = normalize_answer(feedback).split(), normalize_answer(answer).split()
    return any(f[i:i + len(a)] == a for i in range(len(f) - len(a) + 1))


# ---------------------------------------------------------------- HotpotQA

@pytest.mark.parametrize("pred,gold,expected", [
    ("Ed Wood", "ed wood", 1.0),
    ("The Eiffel Tower", "Eiffel Tower in Paris", 2 / 3),
    ("Paris, France.", "paris", 2 / 3),
    ("an apple", "the apple", 1.0),
    ("yes", "no", 0.0),
    ("yes", "Yes", 1.0),
    ("no, it is not", "no", 0.0),        # official HotpotQA rule for yes/no answers
    ("", "Chicago", 0.0),
    ("Chicago Bulls", "Boston Celtics", 0.0),
])
def test_f1_known_pairs(pred, gold, expected):
    assert f1_score(pred, gold) == pytest.approx(expected)


def test_hotpotqa_feedback_names_titles_never_the_answer(shared_data):
    metric = HotpotQAMetric()
    withheld = 0
    for ex in hotpot_all(shared_data):
        for response in (ex.answer, "I am not sure.", "Somebody Else entirely"):
            out = metric(ex, dspy.Prediction(response=response))
            assert not contains_answer(out.feedback, ex.answer), (ex.answer, out.feedback)
            assert out.score == pytest.approx(f1_score(response, ex.answer))
        shown = [t for t in ex.supporting_titles if not contains_answer(t, ex.answer)]
        assert all(f'"{t}"' in out.feedback for t in shown)
        withheld += "withheld" in out.feedback
    assert withheld > 0  # some answers are themselves supporting titles (e.g. comparison questions)


def test_hotpotqa_reads_response_and_strips_thinking(shared_data):
    ex = hotpot_all(shared_data)[0]
    out = HotpotQAMetric()(ex, dspy.Prediction(response=f"<think>maybe Nobody</think>\n {ex.answer} "))
    assert out.score == 1.0


# ---------------------------------------------------------------- AIME

@pytest.mark.parametrize("text,value", [
    ("080", 80), ("80", 80), ("\\boxed{80}", 80), ("The answer is 80.", 80),
    ("So the answer is $\\boxed{080}$.", 80), ("We find 12, then 7, so 80", 80),
    ("Answer: 204", 204), ("the answer is 33 because 2 + 31 = 33 and 5", 33),
    ("\\boxed{336^\\circ}", 336), ("<think>it is 12</think>Final: 45", 45), ("1,000 ways", 1000),
    ("80.0", 80), ("no number here", None), ("", None), (None, None), (17, 17),
    ("\\boxed{\\frac{1}{2}} then 5", 2),
])
def test_aime_answer_normalisation(text, value):
    assert parse_integer_answer(text) == value


def test_aime_metric_on_real_items(shared_data):
    s = load_family("aime", data_dir=shared_data)
    ex = next(e for e in s.train + s.val if e.source_id == "2022-II-8")   # answer "080"
    right = AIMEMetric()(ex, dspy.Prediction(response="... so $\\boxed{80}$"))
    wrong = AIMEMetric()(ex, dspy.Prediction(response="The answer is 81."))
    assert right.score == 1.0 and wrong.score == 0.0
    assert "80" in wrong.feedback and "81" in wrong.feedback
    assert ex.solution.strip()[:60] in wrong.feedback          # the worked solution is included
    test_ex = s.test[0]                                          # 2025: no solution available
    out = AIMEMetric()(test_ex, dspy.Prediction(response=str(test_ex.answer)))
    assert out.score == 1.0 and "No worked solution" in out.feedback


def test_aime_pass_at_1_runs_five_uncached_attempts(shared_data):
    s = load_family("aime", data_dir=shared_data)
    examples = s.test[:2]
    answers = {e.request.strip(): e.answer for e in examples}
    seen = {}

    def respond(call):  # alternates right/wrong per problem: only visible if every attempt really calls the LM
        req = call.field("request")
        seen[req] = seen.get(req, 0) + 1
        return {"response": str(answers[req] if seen[req] % 2 else answers[req] + 1)}

    engine = ScriptedEngine(respond)
    lm = dspy.LM("scripted/cached", engine=engine, cache=True, num_retries=0)   # caching ON by default
    result = aime_pass_at_1(SeedProgram(), examples, attempts=5, lm=lm)
    assert len(engine.calls) == 10
    assert all(v == [1.0, 0.0, 1.0, 0.0, 1.0] for v in result.per_example.values())
    assert result.mean == pytest.approx(0.6)


def test_aime_pass_at_1_counts_exceptions_as_zero(shared_data):
    class Boom(dspy.Module):
        def forward(self, request):
            raise RuntimeError("specialist crashed")

    ex = load_family("aime", data_dir=shared_data).test[:1]
    assert aime_pass_at_1(Boom(), ex, attempts=2, lm=scripted_lm(lambda c: {})).mean == 0.0


# ---------------------------------------------------------------- PUPA

def judge_lm(quality=(True, True), leaked=1):
    """Scripted judges: quality verdict per order (A=program first, then A=reference), fixed leak count."""
    def respond(call):
        if "judgment" in call.output_fields:
            program_first = "PROGRAM RESPONSE" in call.field("response_A")
            return {"reasoning": "compared", "judgment": quality[0] if program_first else quality[1]}
        if "num_pii_leaked" in call.output_fields:
            return {"reasoning": "counted", "num_pii_leaked": leaked}
        raise AssertionError(f"unexpected judge call: {call.output_fields}")
    return scripted_lm(respond)


@pytest.fixture(scope="module")
def pupa_examples():
    from tests.conftest import require_shared_data
    return load_family("pupa", data_dir=require_shared_data()).train


def one_unit(examples):
    return next(e for e in examples if len(e.pii_units) == 1)


def test_pupa_score_quality_and_leakage(pupa_examples):
    ex = one_unit(pupa_examples)
    lm = judge_lm(quality=(True, False), leaked=1)
    out = PupaMetric(judge_lm=lm)(ex, dspy.Prediction(response="PROGRAM RESPONSE", external_request=ex.request))
    assert out.score == pytest.approx((1 + (1 - 1)) / 2)
    assert "leaked 1 of 1" in out.feedback and "at least as good" in out.feedback
    assert len(lm.scripted.calls) == 3     # two quality orders + one leakage count
    prompts = " ".join(c.prompt for c in lm.scripted.calls)
    assert ex.target_response[:50] in prompts and ex.pii_units[0] in prompts


def test_pupa_leak_count_above_annotation_goes_negative(pupa_examples):
    ex = one_unit(pupa_examples)
    out = PupaMetric(judge_lm=judge_lm(quality=(False, True), leaked=3))(
        ex, dspy.Prediction(response="PROGRAM RESPONSE", external_request=ex.request))
    # quality 0 (worse in the program-first order, consistent), leakage 3/1 = 3 -> (0 + (1 - 3)) / 2 = -1
    assert out.score == pytest.approx(-1.0)
    assert out.leakage == pytest.approx(3.0)


def test_pupa_inconsistent_quality_judge_counts_as_good(pupa_examples):
    ex = pupa_examples[0]
    out = PupaMetric(judge_lm=judge_lm(quality=(False, False), leaked=0))(
        ex, dspy.Prediction(response="PROGRAM RESPONSE", external_request="a harmless request"))
    assert out.quality == 1.0 and out.score == pytest.approx(1.0)


def test_pupa_no_delegation_means_no_leak_and_no_leak_judge(pupa_examples):
    ex = pupa_examples[0]
    lm = judge_lm(quality=(True, True), leaked=99)
    out = PupaMetric(judge_lm=lm)(ex, dspy.Prediction(response="PROGRAM RESPONSE"))
    assert out.score == 1.0 and "no request was sent" in out.feedback
    assert all("num_pii_leaked" not in c.output_fields for c in lm.scripted.calls)


@pytest.mark.parametrize("pred", [None, RuntimeError("specialist slot 2 failed: boom")])
def test_pupa_failure_scores_zero_without_judging(pupa_examples, pred):
    lm = judge_lm()
    out = PupaMetric(judge_lm=lm)(pupa_examples[0], pred)
    assert out.score == 0.0 and "failed" in out.feedback
    assert lm.scripted.calls == []


# ---------------------------------------------------------------- LiveBench-IF

@pytest.fixture(scope="module")
def lb_examples():
    from tests.conftest import require_shared_data
    return load_family("livebench_if", data_dir=require_shared_data()).train


def test_livebench_wrapper_score_and_feedback(lb_examples):
    ex = next(e for e in lb_examples if len(e.instruction_id_list) >= 2)
    seen = {}

    def checker(response, ids, kwargs, prompt):
        seen.update(response=response, ids=ids, kwargs=kwargs, prompt=prompt)
        return [(i, k == 0, "ok" if k == 0 else "missing") for k, i in enumerate(ids)]

    metric = LiveBenchIFMetric(checker)
    out = metric(ex, dspy.Prediction(response="<think>plan the answer</think>\n\n  Final text.  "))
    n = len(ex.instruction_id_list)
    assert out.score == pytest.approx((0 + 1 / n) / 2)
    assert seen["response"] == "Final text." and seen["prompt"] == ex.request
    assert seen["ids"] == ex.instruction_id_list and all(None not in kw.values() for kw in seen["kwargs"])
    assert f"Satisfied constraints: {ex.instruction_id_list[0]} (ok)" in out.feedback
    assert all(i in out.feedback.split("Violated constraints:")[1] for i in ex.instruction_id_list[1:])
    assert ex.subtask not in out.feedback and "livebench" not in out.feedback.lower()
    full = metric(ex, dspy.Prediction(response="x"))
    metric = LiveBenchIFMetric(lambda r, i, k, p: [(x, True, "") for x in i])
    assert metric(ex, dspy.Prediction(response="x")).score == 1.0
    assert full.score < 1.0
    assert metric(ex, dspy.Prediction(response="<think>only thoughts</think>")).score == 0.0  # empty answer


def test_livebench_with_real_checkers_if_available(lb_examples):
    pytest.importorskip("dspy_adaptive.tasks.ifeval")
    ex = lb_examples[0]
    out = LiveBenchIFMetric()(ex, dspy.Prediction(response="A short plain answer."))
    assert 0.0 <= out.score <= 1.0 and "constraints satisfied" in out.feedback


# ---------------------------------------------------------------- mixture

class Recorder:
    def __init__(self, name, score=0.5, feedback="fine"):
        self.name, self.score, self.feedback, self.calls = name, score, feedback, []

    def __call__(self, gold, pred, trace=None, pred_name=None, pred_trace=None):
        self.calls.append(gold.id)
        return dspy.Prediction(score=self.score, feedback=self.feedback)


def test_mixture_metric_dispatches_by_hidden_family(shared_data):
    m = load_mixture(data_dir=shared_data)
    recs = {f: Recorder(f, score=i / 10) for i, f in enumerate(m.families)}
    metric = MixtureMetric(recs)
    for fam, s in m.families.items():
        out = metric(s.train[0], dspy.Prediction(response="x"), None, None, None)
        assert out.score == recs[fam].score
    assert {f: len(r.calls) for f, r in recs.items()} == dict.fromkeys(m.families, 1)
    with pytest.raises(ValueError, match="family"):
        metric(dspy.Example(id="q", request="r", family="mystery").with_inputs("request"),
               dspy.Prediction(response="x"))


def test_mixture_failure_before_dispatch_and_label_scrubbing(shared_data):
    m = load_mixture(data_dir=shared_data)
    lm = judge_lm()
    metric = MixtureMetric(judge_lm=lm, ifeval_checker=lambda r, i, k, p: [(x, True, "") for x in i])
    for s in m.families.values():
        out = metric(s.train[0], None)
        assert out.score == 0.0
    assert lm.scripted.calls == []                     # PUPA judge never called on a failure
    leaky = MixtureMetric({"aime": Recorder("aime", feedback="as usual for livebench_if and hotpotqa tasks")})
    out = leaky(m.family("aime").train[0], dspy.Prediction(response="1"))
    assert "livebench_if" not in out.feedback and "hotpotqa" not in out.feedback


def test_mixture_feedback_never_names_labels(shared_data):
    m = load_mixture(data_dir=shared_data)
    metric = MixtureMetric(judge_lm=judge_lm(), ifeval_checker=lambda r, i, k, p: [(x, False, "no") for x in i])
    for s in m.families.values():
        for ex in s.train[:5]:
            out = metric(ex, dspy.Prediction(response="PROGRAM RESPONSE", external_request="hello"))
            assert not re.search(r"\b(hotpotqa|pupa|livebench_if|family|subtask)\b", out.feedback)
            if ex.subtask:
                assert ex.subtask not in out.feedback


def test_strip_thinking():
    assert strip_thinking("<think>a</think> b <think>c</think>d ") == "b d"
    assert strip_thinking("reasoning...</think>answer") == "answer"
    assert strip_thinking("<think>never closed") == ""


def test_livebench_lazily_imports_the_ifeval_checkers(monkeypatch, lb_examples):
    import sys
    import types

    fake = types.ModuleType("dspy_adaptive.tasks.ifeval")
    fake.evaluate_instructions = lambda response, ids, kwargs, prompt: [(i, True, "checked") for i in ids]
    monkeypatch.setitem(sys.modules, "dspy_adaptive.tasks.ifeval", fake)
    out = LiveBenchIFMetric()(lb_examples[0], dspy.Prediction(response="text"))
    assert out.score == 1.0 and "checked" in out.feedback
