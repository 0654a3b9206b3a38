"""GRPO (issue 15 item 9): TRL's GRPOTrainer on a tiny randomly initialised model built here (no hub
download), with the mixture's metric as reward and the paper's budget rule. Skipped without the grpo extra."""

from __future__ import annotations

import pytest

from benchmarks.grpo import grpo_schedule, metric_reward, p0_messages, parse_response


def test_the_papers_budget_rule():
    s = grpo_schedule(18000, 180, 180, num_generations=8, eval_every=5)
    assert (s.updates, s.training_calls, s.validation_calls, s.total) == (12, 17280, 540, 17820)
    # the paper's 45-prompt feedback split: 45 x 45 x 8 = 16,200 rollouts + 10 x 180 validation = 18,000
    s = grpo_schedule(18000, 45, 180, num_generations=8, eval_every=5)
    assert (s.updates, s.training_calls, s.validation_calls, s.total) == (45, 16200, 1800, 18000)


def test_answer_contract_and_prompt():
    assert parse_response("[[ ## response ## ]]\n42\n\n[[ ## completed ## ]]") == "42"
    assert parse_response("<think>hmm</think> 17") == "17"
    assert parse_response("plain") == "plain"
    msgs = p0_messages("What is 2+2?")
    assert msgs[0]["role"] == "system" and "request" in msgs[0]["content"] and "What is 2+2?" in msgs[-1]["content"]


def _char_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [chr(i) for i in range(32, 127)] + ["\n"]
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    from tokenizers import decoders
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def test_grpo_steps_on_a_tiny_random_model_with_the_mixture_metric_as_reward(tmp_path):
    pytest.importorskip("trl")
    pytest.importorskip("torch")
    import dspy
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from benchmarks.grpo import run_grpo

    torch.manual_seed(0)
    tokenizer = _char_tokenizer()
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=2048, n_embd=32, n_layer=2, n_head=2,
                                       pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                       bos_token_id=tokenizer.eos_token_id))
    seen = []

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):   # the mixture metric's contract
        seen.append(pred.response)
        return dspy.Prediction(score=float("a" in pred.response), feedback="")

    train = [dspy.Example(request=f"say a {i}", answer="a").with_inputs("request") for i in range(2)]
    val = [dspy.Example(request="say a", answer="a").with_inputs("request")]
    run = run_grpo(model=model, tokenizer=tokenizer, trainset=train, valset=val, metric=metric, budget=40,
                   out_dir=tmp_path, num_generations=2, eval_every=1, max_completion_length=6, learning_rate=1e-3,
                   max_updates=2)
    assert run.schedule.updates == 2 and run.schedule.training_calls == 2 * 2 * 2
    assert [v["step"] for v in run.validation] == [0, 1, 2]                # before training and every update
    assert run.checkpoint and (tmp_path / "best" / "config.json").exists()
    assert run.metric_calls == 8 + 3 * len(val) <= 40
    assert len(seen) >= 8                                                   # rewards came from the metric
    assert metric_reward(val[0], "[[ ## response ## ]]\na", metric) == 1.0


def test_method_grpo_runs_end_to_end_through_the_benchmark(tmp_path):
    """`python -m benchmarks.run --method grpo` on a tiny random model saved locally (no hub download)."""
    pytest.importorskip("trl")
    import json

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from benchmarks import run as bench
    from tests.conftest import SHARED_DATA

    torch.manual_seed(0)
    tokenizer = _char_tokenizer()
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=4096, n_embd=16, n_layer=1, n_head=2,
                               pad_token_id=0, eos_token_id=1, bos_token_id=1)).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    out = tmp_path / "run"
    bench.main(["--method", "grpo", "--grpo-model", str(tmp_path / "tiny"), "--grpo-generations", "2",
                "--grpo-max-tokens", "4", "--scripted", "--data", str(SHARED_DATA), "--sizes", "1,1,1",
                "--budget", "20", "--aime-attempts", "1", "--no-progress", "--num-threads", "1", "--out", str(out)])
    res = json.loads((out / "results.json").read_text())
    assert res["method"] == "grpo" and res["budget"]["used"] <= 20
    assert res["search"]["extra"]["updates"] == 2 and res["search"]["extra"]["validation"][0]["step"] == 0
    assert len(res["test"]) == 4 and "GRPO" in (out / "tables.md").read_text()
