"""The whole GRPO path on a tiny random policy, no download: `python -m benchmarks.grpo_smoke --out DIR [run flags]`.

Builds a causal LM from a config alone (Qwen3's architecture, the paper's policy family, with random weights),
a character-level tokenizer with a chat template that honours Qwen3's `enable_thinking` switch, saves both under
`DIR/policy`, and runs `python -m benchmarks.run --method grpo --grpo-model DIR/policy` on them with every other
flag passed through (`--scripted --data ../shared/data --sizes 12,12,12 ...`). It checks what a real run needs
before anyone pays for Qwen3-8B: placement and dtype (bfloat16 on a GPU), batched generation, TRL's updates under
the paper's schedule, validation before training and every `--grpo-eval-every` updates, the selected checkpoint,
and the test split. The policy learns nothing useful (random weights, a character vocabulary): the figures are
timings and the schedule, not scores. Prints the device, the schedule, the validation curve, peak GPU memory and
the phases' wall time; the run's own record is `DIR/run` (results.json, tables.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

#: a Qwen-style chat template over plain role markers; `enable_thinking=False` closes an empty think block as
#: Qwen3's does, so the thinking switch the deep profile sets reaches the prompt
CHAT_TEMPLATE = (
    "{%- for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


def char_tokenizer(chat_template: bool = True) -> Any:
    """Printable ASCII and newline, one token each, plus <pad>, <eos>, <unk>; left padding as generation wants.
    `chat_template=False` leaves the template out (prompts then reach the policy as plain text)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [chr(i) for i in range(32, 127)] + ["\n"]
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    out = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>",
                                  padding_side="left")
    if chat_template:
        out.chat_template = CHAT_TEMPLATE
    return out


def tiny_policy(tokenizer: Any, *, layers: int = 2, hidden: int = 64, context: int = 32768, seed: int = 0) -> Any:
    """A Qwen3-architecture causal LM with random weights built from a config (nothing is downloaded)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=hidden // 4, max_position_embeddings=context, tie_word_embeddings=True,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.eos_token_id)
    return AutoModelForCausalLM.from_config(config)


def device_line() -> str:
    import torch
    import transformers
    import trl
    where = (f"CUDA GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "CPU (no CUDA GPU)")
    return f"{where}; torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}"


def summary(results: dict[str, Any], wall_s: float, peak_gib: float | None) -> dict[str, Any]:
    extra = results["search"]["extra"]
    return {"updates": extra["updates"], "prompts_per_update": extra["prompts_per_update"],
            "generations": extra.get("generations"), "eval_every": extra["eval_every"],
            "validation": extra["validation"], "best_step": extra.get("best_step"), "decode": extra["decode"],
            "budget": results["budget"], "test_rows": len(results["test"]),
            "test_mean": (sum(float(r["score"]) for r in results["test"]) / len(results["test"])
                          if results["test"] else None),
            "search_s": results["search"].get("seconds"), "wall_s": round(wall_s, 1), "peak_gpu_gib": peak_gib}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.grpo_smoke", description=__doc__.split("\n\n")[0],
                                epilog="Every other flag goes to `python -m benchmarks.run --method grpo`.")
    p.add_argument("--out", default="runs/grpo-smoke", help="where the policy (DIR/policy) and the run (DIR/run) go")
    p.add_argument("--layers", type=int, default=2, help="decoder layers of the random policy")
    p.add_argument("--hidden", type=int, default=64, help="hidden size of the random policy")
    args, rest = p.parse_known_args(argv)
    from benchmarks import run as bench
    from benchmarks.grpo import param_count, require_grpo

    require_grpo()
    import torch

    out = Path(args.out)
    tokenizer = char_tokenizer()
    model = tiny_policy(tokenizer, layers=args.layers, hidden=args.hidden)
    model.save_pretrained(out / "policy")
    tokenizer.save_pretrained(out / "policy")
    print(f"[grpo-smoke] {device_line()}")
    print(f"[grpo-smoke] random Qwen3-architecture policy, {param_count(model) / 1e6:.2f}M parameters "
          f"-> {out / 'policy'}", flush=True)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    bench.main(["--method", "grpo", "--grpo-model", str(out / "policy"), "--out", str(out / "run"), *rest])
    wall = time.perf_counter() - start
    peak = round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_available() else None
    results = json.loads((out / "run" / "results.json").read_text())
    info = {"device": device_line(), "params": param_count(model), **summary(results, wall, peak)}
    (out / "smoke.json").write_text(json.dumps(info, indent=2))
    print("[grpo-smoke] " + json.dumps(info, indent=2))
    return info


if __name__ == "__main__":
    main(sys.argv[1:])
