"""GRPO (paper Table 2, Appendices D, G.2, K) on TRL's `GRPOTrainer`: `python -m benchmarks.run --method grpo`.

An optional extra: `pip install torch==2.13.0` (the CPU build; a GPU host takes its own) and
`pip install -e ".[grpo]"` (trl, transformers, accelerate). A real run needs open weights (e.g.
`--grpo-model Qwen/Qwen3-8B`) and a GPU; the tests build a tiny randomly initialised model locally.

As in the paper:
* the policy's prompts are the exact DSPy ChatAdapter rendering of the generic seed P0 (`SeedProgram`,
  `request -> response`) for each feedback request (as chat messages when the tokenizer has a chat
  template, else the messages joined as plain text);
* the reward is the mixture's own metric on the parsed answer field: the `[[ ## response ## ]]` field of
  the completion, with a lenient fallback (the text after a closing `</think>`, else the whole completion)
  when the marker is absent; a metric that raises scores 0 (`score_example`'s rules);
* gradients use only the feedback split; the policy is scored on the whole Pareto (validation) set
  before training and every `eval_every` updates, and the validation-best checkpoint is selected;
* budget (Appendix K: 45 updates x 45 prompts x 8 samples = 16,200 training rollouts + 10 passes x 180
  validation calls = 1,800 = 18,000): `grpo_schedule` gives the most updates whose training rollouts and
  validation calls fit the scored-call budget.
It is a pure-generation policy: no retrieval tool, no reflection LM (as in the paper).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import dspy

from dspy_adaptive.program.scoring import normalise_metric_output
from dspy_adaptive.tasks import INPUT_FIELD, OUTPUT_FIELD
from dspy_adaptive.tasks.programs import GenericTask

_FIELD = re.compile(r"\[\[ ## " + OUTPUT_FIELD + r" ## \]\]\s*(.*?)(?:\[\[ ## completed ## \]\]|\Z)", re.S)


def require_grpo() -> None:
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

@dataclass(frozen=True)
class GRPOSchedule:
    updates: int
    training_calls: int
    validation_calls: int

    @property
    def total(self) -> int:
        return self.training_calls + self.validation_calls


def grpo_schedule(budget: int, n_train: int, n_val: int, num_generations: int = 8,
                  eval_every: int = 5) -> GRPOSchedule:
    """The most updates U (each samples every feedback prompt `num_generations` times) such that
    U x n_train x G training rollouts + (1 + floor(U / eval_every)) x n_val validation calls <= budget."""
    per_update = n_train * num_generations
    updates = 0
    while True:
        u = updates + 1
        if u * per_update + (1 + u // eval_every) * n_val > budget:
            break
        updates = u
    return GRPOSchedule(updates, updates * per_update, (1 + updates // eval_every) * n_val)


# -- the run -------------------------------------------------------------------------------------------------

@dataclass
class GRPORun:
    checkpoint: str | None
    schedule: GRPOSchedule
    validation: list[dict[str, float]] = field(default_factory=list)   # {"step", "mean"} per validation pass
    best_step: int = 0
    metric_calls: int = 0


def generate(model: Any, tokenizer: Any, requests: Sequence[str], max_new_tokens: int,
             temperature: float = 0.0) -> list[str]:
    import torch

    out = []
    for request in requests:
        prompt = prompt_for(request, tokenizer)
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True) \
            if isinstance(prompt, list) else prompt
        ids = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            gen = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=temperature > 0,
                                 temperature=temperature if temperature > 0 else None,
                                 pad_token_id=tokenizer.pad_token_id)
        out.append(tokenizer.decode(gen[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))
    return out


def validate(model: Any, tokenizer: Any, valset: Sequence[dspy.Example], metric: Callable,
             max_new_tokens: int) -> float:
    completions = generate(model, tokenizer, [ex[INPUT_FIELD] for ex in valset], max_new_tokens)
    scores = [metric_reward(ex, c, metric) for ex, c in zip(valset, completions)]
    return sum(scores) / len(scores) if scores else 0.0


def run_grpo(*, model: Any, tokenizer: Any, trainset: Sequence[dspy.Example], valset: Sequence[dspy.Example],
             metric: Callable, budget: int, out_dir: str | Path, num_generations: int = 8, eval_every: int = 5,
             max_completion_length: int = 8192, learning_rate: float = 1e-6, temperature: float = 0.6,
             seed: int = 0, max_updates: int | None = None, extra_args: dict[str, Any] | None = None) -> GRPORun:
    """GRPO on the feedback split with the mixture metric as reward, under the paper's budget rule.

    `model`: a transformers causal LM (or a model id/path TRL loads); `tokenizer` its tokenizer. Every
    `eval_every` updates (and before training) the policy is scored on `valset`; the validation-best
    state is saved to `out_dir/best` and returned as the checkpoint. `max_updates` caps the schedule
    (tests)."""
    require_grpo()
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    schedule = grpo_schedule(budget, len(trainset), len(valset), num_generations, eval_every)
    updates = schedule.updates if max_updates is None else min(schedule.updates, max_updates)
    schedule = GRPOSchedule(updates, updates * len(trainset) * num_generations,
                            (1 + updates // eval_every) * len(valset))
    if updates < 1:
        raise SystemExit(f"the budget ({budget}) does not fit one GRPO update ({len(trainset)} prompts x "
                         f"{num_generations} samples + validation)")
    by_row = {str(i): ex for i, ex in enumerate(trainset)}
    data = Dataset.from_list([{"prompt": prompt_for(ex[INPUT_FIELD], tokenizer), "row": str(i)}
                              for i, ex in enumerate(trainset)])

    def reward(prompts, completions, row, **_):
        return [metric_reward(by_row[r], completion_text(c), metric) for r, c in zip(row, completions)]

    out = Path(out_dir)
    run = GRPORun(None, schedule)
    best = {"mean": -math.inf}

    def record(step: int, model_: Any) -> None:
        mean = validate(model_, tokenizer, valset, metric, max_completion_length)
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

    # one update = every feedback prompt sampled num_generations times
    batch = len(trainset) * num_generations
    config = GRPOConfig(output_dir=str(out / "trainer"), max_steps=updates, learning_rate=learning_rate,
                        num_generations=num_generations, per_device_train_batch_size=batch,
                        gradient_accumulation_steps=1, max_completion_length=max_completion_length,
                        temperature=temperature, seed=seed, report_to="none", save_strategy="no",
                        logging_steps=1, use_cpu=not _has_cuda(), **(extra_args or {}))
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=data,
                          processing_class=tokenizer, callbacks=[ValidateEvery()])
    record(0, trainer.model)                       # before training
    trainer.train()
    run.metric_calls = schedule.training_calls + len(run.validation) * len(valset)
    return run


def _has_cuda() -> bool:
    import torch
    return bool(torch.cuda.is_available())


class GRPOPolicy(dspy.Module):
    """The selected GRPO checkpoint as a program `request -> response` (greedy generation on the P0 prompt)."""

    def __init__(self, checkpoint: str, max_new_tokens: int = 8192):
        super().__init__()
        require_grpo()
        from transformers import AutoModelForCausalLM, AutoTokenizer
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint)
        self.max_new_tokens = max_new_tokens

    def forward(self, **inputs: Any) -> dspy.Prediction:
        text = generate(self.model, self.tokenizer, [inputs[INPUT_FIELD]], self.max_new_tokens)[0]
        return dspy.Prediction(**{OUTPUT_FIELD: parse_response(text)})


__all__ = ["GRPOPolicy", "GRPORun", "GRPOSchedule", "grpo_schedule", "metric_reward", "p0_messages",
           "parse_response", "prompt_for", "require_grpo", "run_grpo"]
