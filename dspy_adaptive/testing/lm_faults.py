"""LM fault injection: a dspy engine that wraps another LM and fails a share of its calls.

    flaky = faulty_lm(real_lm, rate=0.1, seed=0)        # use anywhere a dspy.LM goes

Faults are drawn deterministically from (seed, prompt, attempt number), so a run is reproducible and
a retried call can succeed. Kinds: exception (provider 5xx), rate_limit, timeout — which DSPy's LM
layer retries with bounded backoff (`num_retries`, honouring `retry_after`) — and empty, truncated
and wrong_format completions, which reach the adapter as bad output. Every injected fault is counted
on `engine.counts` by kind.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from typing import Any, Sequence

import dspy
from dspy.lm15 import Message, RateLimitError, Response, ServerError, TextPart, TimeoutError, Usage

FAULT_KINDS = ("exception", "rate_limit", "timeout", "empty", "truncated", "wrong_format")


class FaultInjectingEngine:
    """complete(Request) -> Response, failing `rate` of calls with one of `kinds`."""

    def __init__(self, inner: dspy.LM, *, rate: float = 0.1, seed: int = 0,
                 kinds: Sequence[str] = FAULT_KINDS, retry_after: float = 0.01):
        bad = set(kinds) - set(FAULT_KINDS)
        if bad or not kinds:
            raise ValueError(f"unknown fault kinds {sorted(bad)}; choose from {FAULT_KINDS}")
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be within [0, 1], got {rate}")
        self.inner, self.rate, self.seed, self.kinds = inner, rate, seed, tuple(kinds)
        self.retry_after = retry_after
        self.counts: Counter[str] = Counter()
        self.calls = 0
        self._attempts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _draw(self, key: str) -> str | None:
        with self._lock:
            self.calls += 1
            self._attempts[key] += 1
            attempt = self._attempts[key]
        h = hashlib.sha256(f"{self.seed}|{attempt}|{key}".encode()).digest()
        if int.from_bytes(h[:8], "big") / 2 ** 64 >= self.rate:
            return None
        kind = self.kinds[h[8] % len(self.kinds)]
        with self._lock:
            self.counts[kind] += 1
        return kind

    def complete(self, request: Any) -> Response:
        key = hashlib.sha256(repr((request.system, [(m.role, m.text) for m in request.messages])).encode()).hexdigest()
        kind = self._draw(key)
        if kind == "exception":
            raise ServerError("injected fault: provider returned 500")
        if kind == "rate_limit":
            err = RateLimitError("injected fault: rate limited")
            err.retry_after = self.retry_after
            raise err
        if kind == "timeout":
            err = TimeoutError("injected fault: request timed out")
            err.retry_after = self.retry_after
            raise err
        text, usage = self._inner_text(request)
        if kind == "empty":
            text = ""
        elif kind == "truncated":
            text = text[: max(0, len(text) // 3)]
        elif kind == "wrong_format":
            text = "Sure! Here is my answer, in a format nobody asked for."
        return Response(id=None, model=self.inner.model, message=Message.assistant([TextPart(text)]),
                        finish_reason="length" if kind == "truncated" else "stop", usage=usage)

    def _inner_text(self, request: Any) -> tuple[str, Usage]:
        engine = getattr(self.inner, "engine", None)
        if engine is not None and hasattr(engine, "complete"):
            resp = engine.complete(request)
            text = "".join(p.text for p in resp.message.parts if hasattr(p, "text") and p.text)
            return text, resp.usage
        messages = ([{"role": "system", "content": request.system}] if request.system else []) + [
            {"role": m.role, "content": m.text or ""} for m in request.messages]
        out = self.inner(messages=messages)
        text = out[0] if isinstance(out[0], str) else str(out[0].get("text", ""))
        return text, Usage(input_tokens=0, output_tokens=0, total_tokens=0)

    def stream(self, request: Any):  # pragma: no cover
        from dspy.lm15 import response_to_events
        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass


def faulty_lm(inner: dspy.LM, *, rate: float = 0.1, seed: int = 0, kinds: Sequence[str] = FAULT_KINDS,
              num_retries: int = 3) -> dspy.LM:
    """Wrap `inner` so that `rate` of its calls fail; `lm.faults` is the engine with `.counts`."""
    engine = FaultInjectingEngine(inner, rate=rate, seed=seed, kinds=kinds)
    lm = dspy.LM(f"faulty/{inner.model}", engine=engine, cache=False, num_retries=num_retries)
    lm.faults = engine
    return lm
