"""What an LM call returned beyond its text: its finish reason, read back per call.

DSPy hands callbacks only the output texts, but records each call's provider response (with its finish
reason) in the LM's history. `FinishWatch` is a callback installed for one call in the calling thread's DSPy
context; it finds that call's history entry by the identity of the outputs DSPy hands the callback, so it
neither copies the LM nor confuses calls of other threads. Used to refuse answers cut off at the token limit
(reflection) and to say so when a judge's answer was (metrics).
"""

from __future__ import annotations

from typing import Any

from dspy.utils.callback import BaseCallback


def finish_reason(entry: Any) -> str | None:
    """The finish reason of one DSPy history entry: an lm15 Response (engine API), a litellm ModelResponse or
    its dict form."""
    response = entry.get("response") if isinstance(entry, dict) else None
    if response is None:
        return None
    reason = getattr(response, "finish_reason", None)
    if reason is not None:
        return str(reason)
    choices = response.get("choices") if isinstance(response, dict) else getattr(response, "choices", None)
    if choices:
        first = choices[0]
        reason = first.get("finish_reason") if isinstance(first, dict) else getattr(first, "finish_reason", None)
        return None if reason is None else str(reason)
    return None


def answer_text(entry: Any) -> str:
    """The raw text of one DSPy history entry's first output."""
    outputs = entry.get("outputs") if isinstance(entry, dict) else None
    if not outputs:
        return ""
    first = outputs[0]
    if isinstance(first, dict):
        first = first.get("text") or ""
    return str(first)


class FinishWatch(BaseCallback):
    """A DSPy callback that reads back the finish reason and raw text of every LM call made inside one
    reflection call. Installed per call in the calling thread's DSPy context (next to the user's own
    callbacks), it finds each call's history entry by the identity of the outputs DSPy hands the callback, so
    it neither copies the LM nor confuses calls made by other threads. With DSPy's history disabled it sees
    nothing, and truncation then goes undetected."""

    def __init__(self) -> None:
        self._instances: dict[str, Any] = {}
        self.calls: list[tuple[str | None, str]] = []     # (finish reason, raw text) per LM call, in order

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self._instances[call_id] = instance

    def on_lm_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        history = getattr(self._instances.pop(call_id, None), "history", None)
        if outputs is None or not isinstance(history, list):
            return
        for entry in reversed(history[-64:]):
            if isinstance(entry, dict) and entry.get("outputs") is outputs:
                self.calls.append((finish_reason(entry), answer_text(entry)))
                return


def cut_off(watch: FinishWatch) -> bool:
    """The last LM answer seen stopped at its token limit."""
    return bool(watch.calls) and watch.calls[-1][0] == "length"
