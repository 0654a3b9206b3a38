"""GRPO (issue 15 item 9): TRL's GRPOTrainer on a tiny randomly initialised model built here (no hub
download), with the mixture's metric as reward and the paper's budget rule. Skipped without the grpo extra."""

from __future__ import annotations

import pytest

from benchmarks.grpo import DecodeSettings, grpo_schedule, metric_reward, p0_messages, parse_response


def test_the_papers_schedule_45_updates_at_18k_and_227_at_90k():
    """Appendices D, G.2: each update samples 45 feedback prompts x 8; validation (180 requests) before training
    and every 5 updates."""
    s = grpo_schedule(18000, 180)
    assert (s.updates, s.training_calls, s.validation_calls, s.total) == (45, 16200, 1800, 18000)
    assert s.validation_steps == [0, 5, 10, 15, 20, 25, 30, 35, 40, 45]            # ten passes
    s = grpo_schedule(90000, 180)
    assert (s.updates, s.training_calls, s.validation_calls, s.total) == (227, 81720, 8280, 90000)
    assert len(s.validation_steps) == 46 and s.validation_steps[-1] == 225          # 46 records through step 225
    assert grpo_schedule(18000 - 1, 180).updates == 44                             # the rule, not a table
    with pytest.raises(ValueError):
        grpo_schedule(18000, 180, prompts_per_update=0)


def test_decoding_follows_the_profile():
    deep, fast = DecodeSettings.for_profile("deep"), DecodeSettings.for_profile("fast")
    assert (deep.temperature, deep.max_new_tokens, deep.enable_thinking, deep.do_sample) == (0.6, 8192, True, True)
    assert (fast.temperature, fast.max_new_tokens, fast.enable_thinking) == (0.3, 4096, False)
    assert deep.generate_kwargs() == {"do_sample": True, "temperature": 0.6, "top_p": 1.0}
    assert DecodeSettings(0.0, 10, False).generate_kwargs() == {"do_sample": False}
    assert DecodeSettings.for_profile("deep", 64).max_new_tokens == 64


def test_an_8b_policy_is_never_trained_without_a_gpu(monkeypatch):
    import benchmarks.grpo as grpo
    monkeypatch.setattr(grpo, "has_cuda", lambda: False)
    with pytest.raises(SystemExit, match=r"refusing to train a 8\.0B-parameter policy on the CPU"):
        grpo.require_gpu_for(8_000_000_000)
    grpo.require_gpu_for(1_000_000)                                        # a tiny model may (tests)
    monkeypatch.setattr(grpo, "has_cuda", lambda: True)
    grpo.require_gpu_for(8_000_000_000)


def test_answer_contract_and_prompt():
    assert parse_response("[[ ## response ## ]]\n42\n\n[[ ## completed ## ]]") == "42"
    assert parse_response("<think>hmm</think> 17") == "17"
    assert parse_response("plain") == "plain"
    msgs = p0_messages("What is 2+2?")
    assert msgs[0]["role"] == "system" and "request" in msgs[0]["content"] and "What is 2+2?" in msgs[-1]["content"]


def _char_tokenizer():
    from benchmarks.grpo_smoke import char_tokenizer
    return char_tokenizer(chat_template=False)


def _tiny_policy_dir(tmp_path):
    """A one-layer GPT-2 with random weights and the character tokenizer, saved under tmp_path/tiny."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    tokenizer = _char_tokenizer()
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=4096, n_embd=16, n_layer=1, n_head=2,
                               pad_token_id=0, eos_token_id=1, bos_token_id=1)).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    return tmp_path / "tiny"


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
                   out_dir=tmp_path, num_generations=2, prompts_per_update=2, eval_every=1,
                   decode=DecodeSettings.for_profile("deep", 6), learning_rate=1e-3, max_updates=2)
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

    from benchmarks import run as bench
    from tests.conftest import SHARED_DATA

    tiny = _tiny_policy_dir(tmp_path)
    out = tmp_path / "run"
    bench.main(["--method", "grpo", "--grpo-model", str(tiny), "--grpo-generations", "2",
                "--grpo-max-tokens", "4", "--scripted", "--data", str(SHARED_DATA), "--sizes", "1,1,1",
                "--budget", "20", "--aime-attempts", "1", "--no-progress", "--num-threads", "1", "--out", str(out)])
    res = json.loads((out / "results.json").read_text())
    assert res["method"] == "grpo" and res["budget"]["used"] <= 20
    assert res["search"]["extra"]["updates"] == 2 and res["search"]["extra"]["validation"][0]["step"] == 0
    assert len(res["test"]) == 4 and "GRPO" in (out / "tables.md").read_text()
    extra = res["search"]["extra"]
    assert extra["prompts_per_update"] == 4 and extra["eval_every"] == 5          # 4 feedback prompts here
    assert extra["decode"] == {"temperature": 0.6, "max_new_tokens": 4, "enable_thinking": True, "top_p": 1.0}


def test_generation_is_batched_on_the_policy_device_and_samples_as_the_deep_profile(tmp_path, monkeypatch):
    """Test-time answers come from one batched `generate` per prefetch, left-padded on the model's device, sampled
    at the deep profile's temperature: five attempts at one AIME request are five samples, not one greedy copy."""
    pytest.importorskip("trl")
    import torch

    import benchmarks.grpo as grpo

    policy = grpo.GRPOPolicy(str(_tiny_policy_dir(tmp_path)), max_new_tokens=12, batch_size=8)
    assert policy.decode.temperature == 0.6 and policy.decode.enable_thinking
    assert next(policy.model.parameters()).dtype == torch.float32            # CPU: float32 (GPU: bfloat16)
    calls = []
    real_generate = policy.model.generate

    def spy(**kw):
        calls.append((kw["input_ids"].shape, kw["input_ids"].device, kw.get("do_sample"), kw.get("temperature")))
        return real_generate(**kw)

    monkeypatch.setattr(policy.model, "generate", spy)
    requests = ["Find x if 2x = 6."] * 5 + ["Who wrote Hamlet?", "A much longer request " * 3]
    policy.prefetch(requests)
    assert len(calls) == 1 and calls[0][0][0] == 7                          # one batch of seven
    assert calls[0][1] == policy.model.device and calls[0][2:] == (True, 0.6)
    answers = [policy(request="Find x if 2x = 6.").response for _ in range(5)]
    assert len(set(answers)) > 1                                              # sampled, not greedy
    assert len(calls) == 1                                                    # all five were prefetched
    greedy = grpo.generate(policy.model, policy.tokenizer, ["Find x if 2x = 6."] * 3,
                           grpo.DecodeSettings(0.0, 12, False))
    assert len(set(greedy)) == 1


def test_the_smoke_policy_is_built_from_a_config_and_its_template_honours_the_thinking_switch(tmp_path):
    """`benchmarks.grpo_smoke`: a random Qwen3-architecture policy (nothing downloaded) and a character tokenizer
    whose chat template closes an empty think block when thinking is off, run through `--method grpo`."""
    pytest.importorskip("trl")
    from benchmarks import grpo_smoke
    from tests.conftest import SHARED_DATA

    tok = grpo_smoke.char_tokenizer()
    msgs = [{"role": "user", "content": "hi"}]
    on = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=True)
    off = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert on.endswith("<|assistant|>\n") and off.endswith("<think>\n\n</think>\n\n")
    assert tok.decode(tok("a b\n")["input_ids"]) == "a b\n"
    info = grpo_smoke.main(["--out", str(tmp_path), "--layers", "1", "--hidden", "32", "--scripted", "--data",
                            str(SHARED_DATA), "--sizes", "1,1,1", "--budget", "20", "--grpo-generations", "2",
                            "--grpo-max-tokens", "4", "--aime-attempts", "1", "--no-progress", "--num-threads", "1"])
    assert info["updates"] == 2 and info["budget"]["used"] <= 20 and info["test_rows"] == 4
    assert [v["step"] for v in info["validation"]] == [0] and (tmp_path / "smoke.json").exists()
    assert info["decode"]["temperature"] == 0.6 and info["peak_gpu_gib"] is None      # CPU here
