"""Scripted LMs for tests, benchmarks and demos: deterministic, offline, built on DSPy 3.4's engine API.

`scripted_lm(respond)` returns a real `dspy.LM` whose engine calls `respond(call)` instead of a
provider. `respond` reads the rendered prompt (`call.system`, `call.user`, `call.field(name)`,
`call.output_fields`) and returns either raw completion text or a dict of output field values,
which is rendered in the format DSPy's adapters parse (chat markers, or JSON when the request
asks for a JSON response format). Every call is recorded on `engine.calls` so tests can assert on
exactly what each model saw.

Responders should depend only on the prompt (not on call order) so results do not depend on
thread scheduling.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402
from dspy.lm15 import Message, Response, TextPart, Usage  # noqa: E402

_FIELD_RE = re.compile(r"\[\[ ## (\w+) ## \]\]\n(.*?)(?=\n\n\[\[ ## |\n\nRespond with |\Z)", re.S)
_OUTPUT_FIELDS_RE = re.compile(r"Your output fields are:\n(.*?)(?:\n\n|\Z)", re.S)


@dataclass(frozen=True)
class ScriptedCall:
    """What one LM call saw, in plain strings."""

    system: str
    messages: tuple[dict[str, str], ...]
    json_mode: bool

    @property
    def user(self) -> str:
        """The last user message (the current request, after any demos)."""
        for m in reversed(self.messages):
            if m["role"] == "user":
                return m["content"]
        return ""

    @property
    def prompt(self) -> str:
        """System prompt and every message joined: what the model read, for leak assertions."""
        return "\n\n".join([self.system] + [m["content"] for m in self.messages])

    def field(self, name: str, default: str | None = None) -> str | None:
        """Value of input field `name` in the current request (chat-adapter rendering)."""
        for key, value in _FIELD_RE.findall(self.user):
            if key == name:
                return value.strip()
        return default

    @property
    def output_fields(self) -> tuple[str, ...]:
        m = _OUTPUT_FIELDS_RE.search(self.system)
        if not m:
            return ()
        return tuple(re.findall(r"`(\w+)`", m.group(1)))

    @property
    def instructions(self) -> str:
        """The signature instructions as rendered by the adapter."""
        m = re.search(r"In adhering to this structure, your objective is: \n?(.*)\Z", self.system, re.S)
        return m.group(1).strip() if m else ""


Responder = Callable[[ScriptedCall], "str | Mapping[str, Any]"]


def format_fields(fields: Mapping[str, Any], json_mode: bool = False) -> str:
    """Render output field values the way DSPy's ChatAdapter (or JSONAdapter) parses them."""
    if json_mode:
        return json.dumps({k: v for k, v in fields.items()})
    parts = []
    for name, value in fields.items():
        if not isinstance(value, str):
            value = json.dumps(value)
        parts.append(f"[[ ## {name} ## ]]\n{value}")
    parts.append("[[ ## completed ## ]]")
    return "\n\n".join(parts)


class ScriptedEngine:
    """A dspy engine (`complete(Request) -> Response`) driven by a Python responder."""

    def __init__(self, respond: Responder, *, latency: float = 0.0, model: str = "scripted"):
        self.respond = respond
        self.latency = latency
        self.model = model
        self.calls: list[ScriptedCall] = []
        self._lock = threading.Lock()

    def complete(self, request: Any) -> Response:
        system = request.system if isinstance(request.system, str) else "".join(
            p.text for p in (request.system or []))
        messages = tuple({"role": m.role, "content": m.text or ""} for m in request.messages)
        last = messages[-1]["content"] if messages else ""
        call = ScriptedCall(system=system or "", messages=messages,
                            json_mode=request.config.response_format is not None
                            or "Respond with a JSON object" in last)
        with self._lock:
            self.calls.append(call)
        if self.latency:
            time.sleep(self.latency)
        out = self.respond(call)
        if isinstance(out, str):
            text = out
        else:  # fill output fields the responder left out (e.g. ChainOfThought's reasoning)
            fields = {name: "" for name in call.output_fields}
            fields.update(out)
            text = format_fields(fields, call.json_mode)
        n_in = max(1, len(call.prompt) // 4)
        n_out = max(1, len(text) // 4)
        return Response(id=None, model=self.model, message=Message.assistant([TextPart(text)]),
                        finish_reason="stop",
                        usage=Usage(input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out))

    def stream(self, request: Any):  # pragma: no cover - streaming is not used by the optimizer
        from dspy.lm15 import response_to_events
        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass

    def prompts(self) -> list[str]:
        with self._lock:
            return [c.prompt for c in self.calls]


def scripted_lm(respond: Responder, *, latency: float = 0.0, model: str = "scripted/test") -> dspy.LM:
    """A `dspy.LM` answering through `respond`; `lm.engine` is the ScriptedEngine (with `.calls`)."""
    engine = ScriptedEngine(respond, latency=latency, model=model)
    lm = dspy.LM(model, engine=engine, cache=False, num_retries=0)
    lm.scripted = engine  # convenient handle; dspy keeps its own reference too
    return lm
