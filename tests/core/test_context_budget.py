"""Issue 27 item 1: what reflection reads fits a token budget sized from the reflection LM's window, long
values keep their beginning and end with a marker, and a request's closing part and question survive."""

from __future__ import annotations

import json
import re

import dspy
import pytest

from dspy_adaptive.data import Row
from dspy_adaptive.program.library import Library
from dspy_adaptive.reflection import budget
from dspy_adaptive.reflection.propose import Reflector
from dspy_adaptive.reflection.traces import render_traces
from dspy_adaptive.schema import RowResult
from tests.conftest import SHARED_DATA

CONSTRAINT_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")


def _row(i: int, request: str) -> Row:
    return Row(f"r{i}", dspy.Example(request=request, answer="hidden").with_inputs("request"))


def _result(i: int, output: str = "out", feedback: str = "fb", steps: tuple = ()) -> RowResult:
    return RowResult(f"r{i}", 0.0, feedback, {"response": output}, 0, 0, None, None, steps)


class _LM:
    def __init__(self, model: str = "hosted_vllm/not-known", max_tokens: int | None = 4096, n_ctx: int | None = None):
        self.model, self.kwargs = model, ({"max_tokens": max_tokens} if max_tokens else {})
        if n_ctx:
            self.engine = type("Engine", (), {"n_ctx": n_ctx})()


def test_shorten_keeps_beginning_end_and_protected_spans_with_a_marker():
    text = "HEAD " + "a" * 3000 + " MIDDLE-QUESTION? " + "b" * 3000 + " END"
    mid = text.index("MIDDLE")
    out = budget.shorten(text, 400, [(mid, mid + len("MIDDLE-QUESTION?"))])
    assert out.startswith("HEAD ") and out.endswith(" END") and "MIDDLE-QUESTION?" in out
    left_out = sum(int(n) for n in re.findall(r"\[\.\.\. (\d+) characters left out \.\.\.\]", out))
    kept = len(re.sub(r"\n?\[\.\.\. \d+ characters left out \.\.\.\]\n?", "", out))
    assert kept + left_out == len(text) and len(out) <= 400 + 20
    assert budget.shorten("short", 400) == "short"


def test_request_spans_protect_the_closing_part_a_question_line_and_the_last_question():
    article = "Sentence of the article. " * 200
    req = f"Read this.\n-------\n{article}\n-------\nRewrite it. Use 3 paragraphs. Do not use the word cat."
    (a, b), = budget.request_spans(req)
    assert b == len(req) and req.index("Rewrite it.") >= a and len(req) - a <= budget.TAIL_MAX_CHARS
    ctx = "Paragraph about things. " * 300
    multi = f"Question: Which river is longer, the Nile or the Amazon?\nContext:\n{ctx}\nAnswer briefly."
    shown = budget.shorten(multi, 300, budget.request_spans(multi))
    assert "Question: Which river is longer, the Nile or the Amazon?" in shown and shown.endswith("Answer briefly.")
    single = "Let x be real. " * 300 + "Find the number of ordered pairs (m, n) such that m + n = 10."
    shown = budget.shorten(single, 200, budget.request_spans(single))
    assert shown.endswith("Find the number of ordered pairs (m, n) such that m + n = 10.")


def test_allocate_shows_short_values_whole_and_shares_the_rest_by_weight():
    items = [("input", 100, 100), ("input", 5000, 300), ("feedback", 5000, 120), ("step", 5000, 120)]
    limits = budget.allocate(items, 3000)
    assert limits[0] == 100 and sum(limits) <= 3000
    assert limits[1] == limits[2] > limits[3] >= 120                   # equal weights share equally; steps less
    assert budget.allocate(items, 10**6) == [100, 5000, 5000, 5000]     # everything fits: nothing shortened
    assert budget.allocate(items, 10) == [100, 300, 120, 120]           # floors are kept past the budget


def test_the_window_comes_from_the_engine_litellm_or_the_default_and_can_be_given():
    assert budget.context_window(_LM(n_ctx=8192)) == 8192
    assert budget.context_window(_LM("openai/gpt-4.1")) > 1_000_000       # litellm's model info
    assert budget.context_window(_LM()) == budget.DEFAULT_CONTEXT_TOKENS
    r = Reflector(_LM(), input_names=("request",), output_names=("response",), context_tokens=65_536)
    assert r.window() == 65_536
    small = Reflector(_LM(max_tokens=2000), input_names=("request",), output_names=("response",),
                      context_tokens=16_384).trace_tokens(Library.empty(5))
    large = Reflector(_LM(max_tokens=2000), input_names=("request",), output_names=("response",),
                      context_tokens=131_072).trace_tokens(Library.empty(5))
    assert budget.MIN_TRACE_TOKENS <= small < 16_384 - 2000 and large > 100_000


def test_traces_fit_the_budget_and_mark_what_was_left_out():
    rows = [_row(i, f"Request {i}. " + "word " * 3000 + f"Final instruction {i}: answer in French.")
            for i in range(8)]
    results = [_result(i, "x" * 1800, "feedback " * 1500) for i in range(8)]
    text = render_traces(rows, results, budget_tokens=3000)
    assert budget.estimate_tokens(text) <= 3000 + 400                    # the records (+ the preamble)
    for i in range(8):
        assert f"Request {i}." in text and f"Final instruction {i}: answer in French." in text
    assert "characters left out" in text
    whole = render_traces(rows[:1], results[:1], budget_tokens=100_000)
    assert "characters left out" not in whole


def test_every_livebench_if_constraint_sentence_of_the_shared_samples_survives_a_small_window():
    """All 400 LiveBench-IF samples, 24 per minibatch, with long outputs and feedback, in a 16k window: every
    constraint sentence is shown and the records fit the budget the Reflector computes."""
    path = SHARED_DATA / "livebench_if.jsonl"
    if not path.exists():
        pytest.skip("the shared LiveBench-IF samples are not present")
    requests = [json.loads(line)["turns"][0] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    reflector = Reflector(_LM(max_tokens=4096), input_names=("request",), output_names=("response",),
                          tools=("search",), context_tokens=16_384)
    tokens = reflector.trace_tokens(Library.empty(5))
    cut = 0
    for start in range(0, len(requests), 24):
        batch = requests[start:start + 24]
        rows = [_row(i, r) for i, r in enumerate(batch)]
        results = [_result(i, r.split("-------")[1] if r.count("-------") >= 2 else r, "2 of 3 constraints satisfied.")
                   for i, r in enumerate(batch)]
        text = render_traces(rows, results, budget_tokens=tokens)
        assert budget.estimate_tokens(text) <= tokens + 200
        flat = "\n".join(line.split("| ", 1)[-1] for line in text.splitlines())
        for r in batch:
            for sentence in CONSTRAINT_SPLIT.split(r.rsplit("-------", 1)[-1]):
                assert sentence.strip() in flat, sentence
        cut += text.count("characters left out")
    assert cut > 0                                                       # the window did force shortening


def test_the_window_of_an_lm_with_its_own_engine_costs_no_litellm_import_and_prints_nothing():
    """Issue 31's CPU per call had tripled: every reflection asked litellm for a scripted model's window, importing
    litellm (seconds in a fresh process) and printing its provider list each time. An LM with an engine of its
    own is not looked up; a model litellm serves is looked up once per process, quietly."""
    import subprocess
    import sys

    code = ("import sys, dspy\n"
            "from dspy_adaptive.testing import scripted_lm\n"
            "from dspy_adaptive.reflection.budget import context_window, _litellm_window\n"
            "lm = scripted_lm(lambda c: 'x', model='scripted/reflection')\n"
            "assert context_window(lm) == 32768 and 'litellm' not in sys.modules\n"
            "unknown = dspy.LM('nosuchprovider/some-model')\n"
            "assert context_window(unknown) == 32768 and context_window(unknown) == 32768\n"
            "assert _litellm_window.cache_info().hits >= 1\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok" and "Provider List" not in out.stdout + out.stderr
