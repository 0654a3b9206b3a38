"""GRPO (paper Table 2, Appendices D, G.2, K) on TRL's `GRPOTrainer`: `python -m benchmarks.run --method grpo`.

An optional extra: `pip install torch==2.13.0` (the CPU build; a GPU host takes its own) and
`pip install -e ".[grpo]"` (trl, transformers, accelerate). A real run needs open weights (e.g.
`--grpo-model Qwen/Qwen3-8B`) and a CUDA GPU: training a policy of more than `CPU_MAX_PARAMS` parameters
without one is refused with a clear error (a tiny model may train on the CPU, for tests).

As in the paper:
* the policy's prompts are the exact DSPy ChatAdapter rendering of the generic seed P0 (`SeedProgram`,
  `request -> response`) for each feedback request (as chat messages when the tokenizer has a chat
  template, else the messages joined as plain text);
* the reward is the mixture's own metric on the parsed answer field: the `[[ ## response ## ]]` field of
  the completion, with a lenient fallback (the text after a closing `</think>`, else the whole completion)
  when the marker is absent; a metric that raises scores 0 (`score_example`'s rules);
* one update samples `prompts_per_update` (45) feedback prompts `num_generations` (8) times each: 360
  rollouts; gradients use only the feedback split;
* the policy is scored on the whole Pareto (validation) set before training and every `eval_every` (5)
  updates, and the validation-best checkpoint is selected;
* budget (Appendices D, G.2): `grpo_schedule` gives the most updates U with U x 45 x 8 training rollouts +
  (1 + floor(U / 5)) x 180 validation calls within the scored-call budget: 45 updates at 18,000
  (16,200 + 10 x 180) and 227 at 90,000 (81,720 + 46 x 180);
* decoding follows the deep profile the paper's GRPO used (Appendix B: thinking on, temperature 0.6,
  8,192 tokens) for training rollouts, validation and test alike (`DecodeSettings.for_profile`): sampled,
  so AIME's five test attempts are five independent samples. Generation is batched on the policy's device.
It is a pure-generation policy: no retrieval tool, no reflection LM (as in the paper).
"""

from __future__ import annotations

import math
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import dspy

from dspy_adaptive.program.scoring import normalise_metric_output
from dspy_adaptive.tasks import INPUT_FIELD, OUTPUT_FIELD
from dspy_adaptive.tasks.programs import GenericTask

_FIELD = re.compile(r"\[\[ ## " + OUTPUT_FIELD + r" ## \]\]\s*(.*?)(?:\[\[ ## completed ## \]\]|\Z)", re.S)


def require_grpo() -> None:
    # hub kernels cannot be fetched offline, and transformers 5 asks for them by default when loading weights
    os.environ.setdefault("USE_HUB_KERNELS", "0")
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import trl  # noqa: F401
    except ImportError as e:
        raise SystemExit("--method grpo needs the grpo extra: pip install torch==2.13.0 && pip install -e '.[grpo]' "
                         f"({e})") from e


# -- the P0 prompt and the answer contract ---------------------------------------------------------------

def p0_messages(request: str) -> list[dict[str, str]]:
    """The exact ChatAdapter rendering of P0 for one request (system + user messages)."""
    return dspy.ChatAdapter().format(GenericTask, demos=[], inputs={INPUT_FIELD: request})


def prompt_for(request: str, tokenizer: Any) -> Any:
    """Chat messages when the tokenizer has a chat template (TRL applies it), else the messages as text."""
    messages = p0_messages(request)
    if getattr(tokenizer, "chat_template", None):
        return messages
    return "\n\n".join(m["content"] for m in messages) + "\n\n"


def parse_response(completion: str) -> str:
    """The response field of a completion; lenient fallback after `</think>`, else the whole text."""
    m = _FIELD.search(completion)
    if m:
        return m.group(1).strip()
    if "</think>" in completion:
        return completion.rsplit("</think>", 1)[1].strip()
    return completion.strip()


def completion_text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):   # conversational
        return str(completion[-1].get("content", ""))
    return str(completion)


def metric_reward(example: dspy.Example, completion: str, metric: Callable, failure_score: float = 0.0) -> float:
    try:
        raw = metric(example, dspy.Prediction(**{OUTPUT_FIELD: parse_response(completion)}), None, None, None)
    except Exception:  # noqa: BLE001 - a failing metric scores failure_score, as in score_example
        return failure_score
    return normalise_metric_output(raw, failure_score)[0]


# -- budget ------------------------------------------------------------------------------------------------

PAPER_PROMPTS_PER_UPDATE = 45
PAPER_GENERATIONS = 8
PAPER_EVAL_EVERY = 5


@dataclass(frozen=True)
class GRPOSchedule:
    updates: int
    training_calls: int
    validation_calls: int
    prompts_per_update: int = PAPER_PROMPTS_PER_UPDATE
    eval_every: int = PAPER_EVAL_EVERY

    @property
    def total(self) -> int:
        return self.training_calls + self.validation_calls

    @property
    def validation_steps(self) -> list[int]:
        """The updates after which the policy is validated (0: before training)."""
        return list(range(0, self.updates + 1, self.eval_every))


def grpo_schedule(budget: int, n_val: int, prompts_per_update: int = PAPER_PROMPTS_PER_UPDATE,
                  num_generations: int = PAPER_GENERATIONS, eval_every: int = PAPER_EVAL_EVERY) -> GRPOSchedule:
    """The most updates U, each sampling `prompts_per_update` feedback prompts `num_generations` times, such that
    U x prompts_per_update x G training rollouts + (1 + floor(U / eval_every)) x n_val validation calls <= budget
    (the paper: 45 updates at 18,000, 227 at 90,000, with 45 prompts x 8 and 180 validation requests)."""
    if min(prompts_per_update, num_generations, eval_every) < 1 or n_val < 0:
        raise ValueError("prompts_per_update, num_generations and eval_every must be positive")
    per_update = prompts_per_update * num_generations
    updates = 0
    while (updates + 1) * per_update + (1 + (updates + 1) // eval_every) * n_val <= budget:
        updates += 1
    return GRPOSchedule(updates, updates * per_update, (1 + updates // eval_every) * n_val, prompts_per_update,
                        eval_every)


# -- decoding ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DecodeSettings:
    """How the policy decodes: sampled at `temperature` (0: greedy), `max_new_tokens`, and the chat template's
    thinking switch (Qwen3's `enable_thinking`; ignored by templates without one)."""

    temperature: float
    max_new_tokens: int
    enable_thinking: bool
    top_p: float = 1.0

    @property
    def do_sample(self) -> bool:
        return self.temperature > 0

    @classmethod
    def for_profile(cls, profile: str = "deep", max_new_tokens: int | None = None) -> "DecodeSettings":
        """The paper's execution profile (Appendix B): deep = thinking on, 0.6, 8,192; fast = off, 0.3, 4,096."""
        from dspy_adaptive.program.profiles import PAPER_SETTINGS
        if profile not in PAPER_SETTINGS:
            raise ValueError(f"profile {profile!r}: expected one of {', '.join(PAPER_SETTINGS)}")
        thinking, temperature, tokens = PAPER_SETTINGS[profile]
        return cls(temperature, max_new_tokens or tokens, thinking)

    def generate_kwargs(self) -> dict[str, Any]:
        if not self.do_sample:
            return {"do_sample": False}
        return {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p}


# -- the run -------------------------------------------------------------------------------------------------

@dataclass
class GRPORun:
    checkpoint: str | None
    schedule: GRPOSchedule
    validation: list[dict[str, float]] = field(default_factory=list)   # {"step", "mean"} per validation pass
    best_step: int = 0
    metric_calls: int = 0


#: A policy with more parameters than this is never trained on the CPU (an 8B model would take days there).
CPU_MAX_PARAMS = 100_000_000


def has_cuda() -> bool:
    import torch
    return bool(torch.cuda.is_available())


def require_gpu_for(n_params: int, what: str = "train") -> None:
    """Refuse, with a clear error, to `what` a policy of `n_params` parameters without a CUDA GPU."""
    if n_params > CPU_MAX_PARAMS and not has_cuda():
        raise SystemExit(f"--method grpo: refusing to {what} a {n_params / 1e9:.1f}B-parameter policy on the CPU "
                         "(torch sees no CUDA GPU). Run it on a machine with a GPU (the paper trained Qwen3-8B on "
                         "six), "
                         f"or pass a model of at most {CPU_MAX_PARAMS / 1e6:.0f}M parameters for a smoke test.")


def param_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def config_param_count(name_or_path: str) -> int:
    """Parameters of the model `name_or_path` describes, from its config alone (built on the meta device)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(name_or_path)
    with torch.device("meta"):
        return param_count(AutoModelForCausalLM.from_config(config))


def load_policy(name_or_path: str, what: str = "train") -> tuple[Any, Any]:
    """(model, tokenizer) placed on the GPU in bfloat16 when there is one, else float32 on the CPU; a model
    too large for the CPU is refused before any weight is read."""
    require_grpo()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    require_gpu_for(config_param_count(name_or_path), what)
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, padding_side="left")
    cuda = has_cuda()
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch.bfloat16 if cuda else torch.float32)
    model.to("cuda" if cuda else "cpu")
    return model, tokenizer


def _prompt_text(request: str, tokenizer: Any, decode: DecodeSettings) -> str:
    prompt = prompt_for(request, tokenizer)
    if not isinstance(prompt, list):
        return prompt
    try:
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True,
                                             enable_thinking=decode.enable_thinking)
    except TypeError:    # a template (or tokenizer) without the thinking switch
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)


def generate(model: Any, tokenizer: Any, requests: Sequence[str], decode: DecodeSettings,
             batch_size: int = 16) -> list[str]:
    """Completions for `requests`, `batch_size` at a time, left-padded, on the model's device."""
    import torch

    if getattr(tokenizer, "pad_token_id", None) is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    device = getattr(model, "device", None) or next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[str] = []
    try:
        for start in range(0, len(requests), max(1, batch_size)):
            texts = [_prompt_text(r, tokenizer, decode) for r in requests[start:start + batch_size]]
            batch = tokenizer(texts, return_tensors="pt", padding=True).to(device)
            with torch.no_grad():
                gen = model.generate(**batch, max_new_tokens=decode.max_new_tokens,
                                     pad_token_id=tokenizer.pad_token_id, **decode.generate_kwargs())
            width = batch["input_ids"].shape[1]
            out += tokenizer.batch_decode(gen[:, width:], skip_special_tokens=True)
    finally:
        model.train(was_training)
    return out


def validate(model: Any, tokenizer: Any, valset: Sequence[dspy.Example], metric: Callable,
             decode: DecodeSettings, batch_size: int = 16) -> float:
    completions = generate(model, tokenizer, [ex[INPUT_FIELD] for ex in valset], decode, batch_size)
    scores = [metric_reward(ex, c, metric) for ex, c in zip(valset, completions)]
    return sum(scores) / len(scores) if scores else 0.0


def run_grpo(*, model: Any, tokenizer: Any, trainset: Sequence[dspy.Example], valset: Sequence[dspy.Example],
             metric: Callable, budget: int, out_dir: str | Path, num_generations: int = PAPER_GENERATIONS,
             prompts_per_update: int = PAPER_PROMPTS_PER_UPDATE, eval_every: int = PAPER_EVAL_EVERY,
             decode: DecodeSettings | None = None, micro_batch: int | None = None, learning_rate: float = 1e-6,
             seed: int = 0, max_updates: int | None = None, generation_batch: int = 16,
             extra_args: dict[str, Any] | None = None) -> GRPORun:
    """GRPO on the feedback split with the mixture metric as reward, under the paper's schedule.

    `model`: a transformers causal LM; `tokenizer` its tokenizer. Each update samples `prompts_per_update`
    feedback prompts (cycling through the shuffled split) `num_generations` times, decoded as `decode` says
    (default: the deep profile). Before training and every `eval_every` updates the policy is scored on
    `valset` with the same decoding; the validation-best state is saved to `out_dir/best` and returned as the
    checkpoint. `micro_batch` completions per forward/backward pass (default `num_generations`); gradients of
    one update's 45 x 8 rollouts are accumulated into one optimizer step. `max_updates` caps the schedule
    (tests). Without a CUDA GPU a policy of more than CPU_MAX_PARAMS parameters is refused."""
    require_grpo()
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    require_gpu_for(param_count(model))
    decode = decode or DecodeSettings.for_profile("deep")
    prompts_per_update = min(prompts_per_update, len(trainset))
    schedule = grpo_schedule(budget, len(valset), prompts_per_update, num_generations, eval_every)
    updates = schedule.updates if max_updates is None else min(schedule.updates, max_updates)
    schedule = GRPOSchedule(updates, updates * prompts_per_update * num_generations,
                            (1 + updates // eval_every) * len(valset), prompts_per_update, eval_every)
    if updates < 1:
        raise SystemExit(f"the budget ({budget}) does not fit one GRPO update ({prompts_per_update} prompts x "
                         f"{num_generations} samples + validation of {len(valset)} requests)")
    rollouts = prompts_per_update * num_generations
    micro = micro_batch or num_generations
    if rollouts % micro:
        raise SystemExit(f"--grpo micro batch {micro} must divide the {rollouts} rollouts of one update")
    by_row = {str(i): ex for i, ex in enumerate(trainset)}
    data = Dataset.from_list([{"prompt": prompt_for(ex[INPUT_FIELD], tokenizer), "row": str(i)}
                              for i, ex in enumerate(trainset)])

    def reward(prompts, completions, row, **_):
        return [metric_reward(by_row[r], completion_text(c), metric) for r, c in zip(row, completions)]

    out = Path(out_dir)
    run = GRPORun(None, schedule)
    best = {"mean": -math.inf}

    def record(step: int, model_: Any) -> None:
        mean = validate(model_, tokenizer, valset, metric, decode, generation_batch)
        run.validation.append({"step": step, "mean": mean})
        if mean > best["mean"]:
            best["mean"], run.best_step = mean, step
            model_.save_pretrained(out / "best")
            tokenizer.save_pretrained(out / "best")
            run.checkpoint = str(out / "best")

    class ValidateEvery(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kw):
            if state.global_step % eval_every == 0:
                record(state.global_step, model)

    cuda = has_cuda()
    if not cuda:
        print(f"[grpo] no CUDA GPU: training the {param_count(model) / 1e6:.1f}M-parameter policy on the CPU "
              "(a smoke test, not the paper's run)")
    # one update = prompts_per_update prompts x num_generations rollouts, generated at once, accumulated in
    # micro batches into one optimizer step
    config = GRPOConfig(output_dir=str(out / "trainer"), max_steps=updates, learning_rate=learning_rate,
                        num_generations=num_generations, per_device_train_batch_size=micro,
                        gradient_accumulation_steps=rollouts // micro, steps_per_generation=rollouts // micro,
                        max_completion_length=decode.max_new_tokens, temperature=decode.temperature or 1.0,
                        top_p=decode.top_p, chat_template_kwargs={"enable_thinking": decode.enable_thinking},
                        seed=seed, report_to="none", save_strategy="no", logging_steps=1, use_cpu=not cuda,
                        bf16=cuda, **(extra_args or {}))
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=data,
                          processing_class=tokenizer, callbacks=[ValidateEvery()])
    record(0, trainer.model)                       # before training
    trainer.train()
    run.metric_calls = schedule.training_calls + len(run.validation) * len(valset)
    return run


class GRPOPolicy(dspy.Module):
    """The selected GRPO checkpoint as a program `request -> response`, decoding as the profile says (the deep
    profile: sampled at 0.6, thinking on). `prefetch(requests)` generates many answers in batches on the
    policy's device; `forward` uses a prefetched answer for its request when there is one (each answer once:
    AIME's attempts get distinct samples), else generates."""

    _loaded: dict[str, tuple[Any, Any]] = {}
    _load_lock = threading.Lock()
    _device_lock = threading.Lock()      # one generation at a time on the shared weights

    def __init__(self, checkpoint: str, max_new_tokens: int = 8192, profile: str = "deep", batch_size: int = 16):
        super().__init__()
        require_grpo()
        with GRPOPolicy._load_lock:      # one copy of the weights per checkpoint (cached and uncached programs)
            if checkpoint not in GRPOPolicy._loaded:
                GRPOPolicy._loaded[checkpoint] = load_policy(checkpoint, "evaluate")
        self.model, self.tokenizer = GRPOPolicy._loaded[checkpoint]
        self.decode = DecodeSettings.for_profile(profile, max_new_tokens)
        self.batch_size = batch_size
        self._ready: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def prefetch(self, requests: Sequence[str]) -> None:
        with GRPOPolicy._device_lock:
            texts = generate(self.model, self.tokenizer, list(requests), self.decode, self.batch_size)
        with self._lock:
            for request, text in zip(requests, texts):
                self._ready.setdefault(request, []).append(text)

    def forward(self, **inputs: Any) -> dspy.Prediction:
        request = inputs[INPUT_FIELD]
        with self._lock:
            ready = self._ready.get(request)
            text = ready.pop(0) if ready else None
        if text is None:
            with GRPOPolicy._device_lock:
                text = generate(self.model, self.tokenizer, [request], self.decode, 1)[0]
        return dspy.Prediction(**{OUTPUT_FIELD: parse_response(text)})


__all__ = ["CPU_MAX_PARAMS", "DecodeSettings", "GRPOPolicy", "GRPORun", "GRPOSchedule", "generate", "grpo_schedule",
           "load_policy", "metric_reward", "p0_messages", "parse_response", "prompt_for", "require_gpu_for",
           "require_grpo", "run_grpo"]
