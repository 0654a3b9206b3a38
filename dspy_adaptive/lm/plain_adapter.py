"""An adapter for very small local models: free text asked for in plain words, everything else as JSON.

DSPy's adapters describe the answer as a template (`{"response": "{response}"}`, `[[ ## response ## ]]`), and a
135M-270M model copies the template instead of answering. Measured with SmolLM2-135M on the demo's multi-hop
questions, the three best BM25 passages in the prompt: on the 8 validation questions, token F1 0.005 under
JSONAdapter (256-token cap; answers `{response}` or rambling) against 0.18 with this adapter (96-token cap); on 16
questions with a 48-token cap, 0.037 under ChatAdapter against 0.19 for the same passages and question asked in
plain words. `PlainTextAdapter` asks in plain words whenever the answer is one free-text field -- a signature whose
outputs are a single `str` (a `reasoning` field, as ChainOfThought adds, is left empty: a model this small answers
better directly) -- and keeps DSPy's JSONAdapter for everything else: several outputs, typed outputs (the
structured proposals), and fields that answer a number (the router's `slot`), which the local engine decodes
under a grammar.

    dspy.configure(lm=local_lm(), adapter=PlainTextAdapter())
"""

from __future__ import annotations

from typing import Any

import dspy
from dspy.clients._deprecation import adapter_message_call

from dspy_adaptive.lm.local import NUMBER_ANSWER_FIELDS

REASONING = "reasoning"


def plain_field(signature: type[dspy.Signature]) -> str | None:
    """The one free-text output a plain answer fills (None: the signature goes to JSON)."""
    outputs = [name for name in signature.output_fields if name != REASONING]
    if len(outputs) != 1 or outputs[0] in NUMBER_ANSWER_FIELDS:
        return None
    return outputs[0] if signature.output_fields[outputs[0]].annotation is str else None


class PlainTextAdapter(dspy.JSONAdapter):
    """See the module docstring."""

    def __call__(self, lm: Any, lm_kwargs: dict[str, Any], signature: type[dspy.Signature],
                 demos: list[dict[str, Any]], inputs: dict[str, Any]) -> list[dict[str, Any]]:
        field = plain_field(signature)
        if field is None:
            return super().__call__(lm, lm_kwargs, signature, demos, inputs)
        messages = plain_messages(signature, demos, inputs, field)
        with adapter_message_call(lm, messages):
            outputs = lm(messages=messages, **lm_kwargs)
        return [plain_values(signature, field, out) for out in outputs]

    async def acall(self, lm: Any, lm_kwargs: dict[str, Any], signature: type[dspy.Signature],
                    demos: list[dict[str, Any]], inputs: dict[str, Any]) -> list[dict[str, Any]]:
        field = plain_field(signature)
        if field is None:
            return await super().acall(lm, lm_kwargs, signature, demos, inputs)
        messages = plain_messages(signature, demos, inputs, field)
        with adapter_message_call(lm, messages):
            outputs = await lm.acall(messages=messages, **lm_kwargs)
        return [plain_values(signature, field, out) for out in outputs]


def plain_messages(signature: type[dspy.Signature], demos: list[dict[str, Any]], inputs: dict[str, Any],
                   field: str) -> list[dict[str, str]]:
    """The instructions as the system message; each demo as a user/assistant pair; the inputs as labelled
    blocks, the first input (the request itself) last, where a small model attends most."""
    messages = [{"role": "system", "content": (signature.instructions or "").strip() or f"Give the {field}."}]
    for demo in demos:
        if all(name in demo for name in signature.input_fields) and field in demo:
            messages += [{"role": "user", "content": _blocks(signature, demo)},
                         {"role": "assistant", "content": str(demo[field])}]
    messages.append({"role": "user", "content": _blocks(signature, inputs)})
    return messages


def _blocks(signature: type[dspy.Signature], values: dict[str, Any]) -> str:
    names = list(signature.input_fields)
    order = names[1:] + names[:1]
    return "\n\n".join(f"{name.replace('_', ' ').capitalize()}:\n{_text(values.get(name, ''))}" for name in order)


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "\n".join(str(v) for v in value)
    return str(value)


def plain_values(signature: type[dspy.Signature], field: str, output: Any) -> dict[str, Any]:
    """The output fields from a plain completion: the text (without an echoed "field:" label) is the answer."""
    text = output.get("text") if isinstance(output, dict) else output
    text = (text or "").strip()
    label = f"{field}:"
    if text.lower().startswith(label.lower()):
        text = text[len(label):].strip()
    values: dict[str, Any] = {field: text}
    if REASONING in signature.output_fields:
        values[REASONING] = ""
    return values


__all__ = ["PlainTextAdapter", "plain_field", "plain_messages", "plain_values"]
