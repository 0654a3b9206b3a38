"""Scripted LMs for tests, benchmarks and demos: deterministic, offline, built on DSPy 3.4's engine API.

`ScriptedWorld` (at the end) scripts every role of a run on the four-family mixture of
`dspy_adaptive.tasks`: `adaptive-gepa demo --actor-lm scripted` and the benchmark runner use it.

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
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import dspy
from dspy.lm15 import Message, Response, TextPart, Usage

from dspy_adaptive.program.library import DEFAULT_ROUTER
from dspy_adaptive.tasks import INPUT_FIELD

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


@dataclass(frozen=True)
class Reply:
    """A responder's answer with an explicit finish reason: `Reply(fields, "length")` is an answer cut off at
    the token limit (what a provider reports as finish_reason "length")."""

    content: "str | Mapping[str, Any]"
    finish_reason: str = "stop"


Responder = Callable[[ScriptedCall], "str | Mapping[str, Any] | Reply"]


def format_fields(fields: Mapping[str, Any], json_mode: bool = False) -> str:
    """Render output field values the way DSPy's ChatAdapter (or JSONAdapter) parses them."""
    if json_mode:
        return json.dumps(dict(fields))
    parts = []
    for name, value in fields.items():
        if not isinstance(value, str):
            value = json.dumps(value)
        parts.append(f"[[ ## {name} ## ]]\n{value}")
    parts.append("[[ ## completed ## ]]")
    return "\n\n".join(parts)


def _text(message: Any) -> str:
    """A message's text: its text parts in order (an image or other media part contributes nothing)."""
    if message.text is not None:
        return message.text
    return "".join(getattr(p, "text", None) or "" for p in (message.parts or ()))


class ScriptedEngine:
    """A dspy engine (`complete(Request) -> Response`) driven by a Python responder."""

    def __init__(self, respond: Responder, *, latency: float = 0.0, model: str = "scripted"):
        self.respond = respond
        self.latency = latency
        self.model = model
        self.calls: list[ScriptedCall] = []
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:     # picklable (Ray actors, processes): a fresh lock and record
        state = dict(self.__dict__)
        state.pop("_lock", None)
        state["calls"] = []
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def complete(self, request: Any) -> Response:
        system = request.system if isinstance(request.system, str) else "".join(
            p.text for p in (request.system or []))
        messages = tuple({"role": m.role, "content": _text(m)} for m in request.messages)
        last = messages[-1]["content"] if messages else ""
        call = ScriptedCall(system=system or "", messages=messages,
                            json_mode=request.config.response_format is not None
                            or "Respond with a JSON object" in last)
        with self._lock:
            self.calls.append(call)
        if self.latency:
            time.sleep(self.latency)
        out = self.respond(call)
        finish = "stop"
        if isinstance(out, Reply):
            out, finish = out.content, out.finish_reason
        if isinstance(out, str):
            text = out
        else:  # fill output fields the responder left out (e.g. ChainOfThought's reasoning)
            fields = dict.fromkeys(call.output_fields, "")
            fields.update(out)
            text = format_fields(fields, call.json_mode)
        n_in = max(1, len(call.prompt) // 4)
        n_out = max(1, len(text) // 4)
        return Response(id=None, model=self.model, message=Message.assistant([TextPart(text)]),
                        finish_reason=finish,
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


# -- a scripted world for the four-family mixture --------------------------------------------------------
# Deterministic responders for every role of a run on the `dspy_adaptive.tasks` schema: the demo command's
# `--actor-lm scripted` and the benchmark runner's `--scripted` use it. Scores of scripted runs mean nothing;
# they show that every part of the system runs.

MATH_DESC = "Mathematics: self-contained competition math problems that ask for an exact integer answer."
QA_DESC = "Factual questions: short public-knowledge questions answered with retrieved evidence."
MATH_SRC = '''class MathSolver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.solve = dspy.ChainOfThought("request -> response",
                                         instructions="Solve the problem and end with the final integer answer.")

    def forward(self, request):
        return dspy.Prediction(response=self.solve(request=request).response)
'''
QA_SRC = '''class Researcher(dspy.Module):
    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict("context, request -> response",
                                   instructions="Answer the question from the context with a short phrase.")

    def forward(self, request):
        passages = search(query=request, k=3)
        return dspy.Prediction(response=self.answer(context="\\n".join(passages), request=request).response)
'''
FPA_V2_SRC = '''class Dispatch(dspy.Module):
    def __init__(self):
        super().__init__()
        self.solve = dspy.ChainOfThought("request -> response",
                                         instructions="Solve the problem and end with the final integer answer.")
        self.respond = dspy.Predict("request -> response", instructions="Respond to the request.")

    def forward(self, request):
        # fpa-v2: dispatch in code
        if "$" in request:
            return dspy.Prediction(response=self.solve(request=request).response)
        return dspy.Prediction(response=self.respond(request=request).response)
'''
FPA_REJECTED_SRC = "import os\n\n" + FPA_V2_SRC.replace("# fpa-v2", "# fpa-v3")  # the sandbox policy rejects it


def looks_math(text: str) -> bool:
    low = text.lower()
    return "$" in text or (bool(re.search(r"\d", text)) and bool(re.search(r"\b(find|probability|remainder)\b", low)))


def looks_question(text: str) -> bool:
    return len(text) < 300 and text.strip().endswith("?") and not looks_math(text)


class ScriptedWorld:
    """Deterministic responders for every role; they read only the prompt (gold answers for AIME and
    HotpotQA are looked up by request text so specialists that 'do the right thing' score)."""

    def __init__(self, examples: Sequence[dspy.Example]):
        self.answers = {}
        for ex in examples:
            if ex.family == "aime":
                self.answers[ex.request.strip()] = ("aime", str(ex.answer))
            elif ex.family == "hotpotqa":
                self.answers[ex.request.strip()] = ("hotpotqa", str(ex.answer))

    def actor(self, call):
        fields = call.output_fields
        if "slot" in fields:                                                   # router
            specialists, request = call.field("specialists") or "", call.field(INPUT_FIELD) or ""
            for cue, test in (("Mathematics", looks_math), ("Factual questions", looks_question)):
                m = re.search(rf"^(\d+): {cue}", specialists, re.M)
                if m and test(request):
                    return {"slot": m.group(1)}
            return {"slot": "0"}
        request = (call.field(INPUT_FIELD) or "").strip()
        kind, answer = self.answers.get(request, (None, None))
        if "final integer" in call.instructions.lower() and kind == "aime":
            return {"reasoning": "Scripted reasoning.", "response": f"The answer is {answer}."}
        if call.field("context") is not None and kind == "hotpotqa":
            return {"response": answer}
        words = request.split()
        return {"response": "Response: " + " ".join(words[:12])}

    def judge(self, call):
        if "judgment" in call.output_fields:
            return {"reasoning": "Scripted judge.", "judgment": "True"}
        return {"reasoning": "Scripted judge.", "num_pii_leaked": "0"}

    def external(self, call):
        return "External reply."

    def reflection(self, call):
        fields = call.output_fields
        specialists = call.field("specialists") or ""
        active = "\n".join(line for line in specialists.splitlines() if "(active" in line)
        free = re.findall(r"^(\d+) \(free\)", specialists, re.M)
        if "action" in fields:                                                 # Adaptive-GEPA: select
            if free and ("Mathematics" not in active or "Factual" not in active):
                return {"action": "activate", "slot": free[0]}
            return {"action": "rewrite_router", "slot": "0"}
        if "profile" in fields:                                                # activate
            if "Mathematics" not in active:
                return {"description": MATH_DESC, "program": MATH_SRC, "profile": "deep"}
            return {"description": QA_DESC, "program": QA_SRC, "profile": "fast"}
        if "new_program" in fields:
            return {"new_program": MATH_SRC if "Mathematics" in (call.field("description") or "") else QA_SRC}
        if "new_description" in fields:
            target = call.field("target_slot") or ""
            m = re.search(rf"^{re.escape(target)}\b.*?(Mathematics|Factual)", specialists, re.M)
            return {"new_description": MATH_DESC if (m and m.group(1) == "Mathematics") else QA_DESC}
        if "new_router" in fields:
            return {"new_router": DEFAULT_ROUTER}
        if "revised_source" in fields:                                         # dspy.GEPA code proposer
            current = call.field("current_source") or ""
            return {"revised_source": FPA_REJECTED_SRC if "# fpa-v2" in current else FPA_V2_SRC}
        if "next_tool_name" in fields:                                         # OEO: a fixed, sensible plan
            done = len(re.findall(r"^turn \d+:", call.field("history") or "", re.M))
            plan = [("inspect", {}), ("run_train", {"sample": 4}), ("evaluate", {"checkpoint": 0}),
                    ("revise", {"slots": {"1": {"description": MATH_DESC, "program": MATH_SRC, "profile": "deep"},
                                          "2": {"description": QA_DESC, "program": QA_SRC, "profile": "fast"}}}),
                    ("evaluate", {"checkpoint": 1}), ("select", {"checkpoint": 1}), ("stop", {})]
            tool, args = plan[min(done, len(plan) - 1)]
            return {"next_thought": f"step {done + 1}", "next_tool_name": tool, "next_tool_args": args}
        if "router" in fields and "specialists" in fields:                      # one-shot: a whole library
            return {"router": DEFAULT_ROUTER,
                    "specialists": [{"description": MATH_DESC, "program": MATH_SRC, "profile": "deep"},
                                    {"description": QA_DESC, "program": QA_SRC, "profile": "fast"}]}
        if "instruction" in fields:                                            # MoP instruction induction
            examples = call.field("examples") or ""
            n = call.field("candidate_number") or "1"
            if "$" in examples:
                return {"instruction": f"Solve the problem and end with the final integer answer. (variant {n})"}
            return {"instruction": f"Respond helpfully and concisely. (variant {n})"}
        return "unsupported"
