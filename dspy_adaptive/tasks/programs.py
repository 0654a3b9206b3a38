"""The generic seed P0 (paper Appendix B "Seed and inactive slots", Appendix D) and a PUPA helper tool.

P0 is one `dspy.Predict` over the mixture's single input: `request -> response`. It serves every
family unchanged (the paper's "generic single-predictor DSPy program"; the GPT-4.1 transfer runs
swap in `dspy.ChainOfThought` with the same signature: `SeedProgram(chain_of_thought=True)`).

PUPA and the seed: P0 answers privacy-sensitive requests itself and never calls the untrusted
external model, so it outputs no `external_request`; the PUPA metric reads a missing or empty
`external_request` as "nothing was delegated" (leakage 0, no judge call) and scores the
response's quality alone. This matches the paper's note that a non-delegating program keeps the
original query local. Specialists that do delegate call the tool from `make_external_llm_tool`
and report the exact request they sent as `external_request`.
"""

from __future__ import annotations

from typing import Any, Callable

import dspy


class GenericTask(dspy.Signature):
    """Respond to the request."""

    request: str = dspy.InputField()
    response: str = dspy.OutputField()


class SeedProgram(dspy.Module):
    """P0: a single predictor `request -> response`."""

    def __init__(self, chain_of_thought: bool = False):
        super().__init__()
        self.predict = (dspy.ChainOfThought if chain_of_thought else dspy.Predict)(GenericTask)

    def forward(self, request: str) -> dspy.Prediction:
        return dspy.Prediction(response=self.predict(request=request).response)


def make_seed_program(chain_of_thought: bool = False) -> SeedProgram:
    return SeedProgram(chain_of_thought=chain_of_thought)


def make_external_llm_tool(lm: Any) -> Callable[[str], str]:
    """A plain function `ask_external_llm(request) -> str` calling the untrusted model `lm` (a dspy.LM).

    PUPA programs send only a redacted request through it and must return that same text as
    `external_request` so the leakage judge sees what left the trusted boundary.
    """
    if lm is None:
        raise ValueError("make_external_llm_tool needs the untrusted model, e.g. dspy.LM('openai/gpt-5.5')")

    def ask_external_llm(request: str) -> str:
        """Send a (redacted) request to the powerful external assistant; returns its reply text."""
        if not isinstance(request, str):
            raise TypeError(f"ask_external_llm(request) needs a string, got {type(request).__name__}")
        if not request.strip():
            return ""
        out = lm(request)
        first = out[0] if isinstance(out, list) and out else out
        return first.get("text", "") if isinstance(first, dict) else str(first)

    return ask_external_llm


__all__ = ["GenericTask", "SeedProgram", "make_external_llm_tool", "make_seed_program"]
