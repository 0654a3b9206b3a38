"""Helpers shared by the sandbox tests (importable: tests/sandbox is on sys.path)."""

from __future__ import annotations

import threading

SECRET = "sk-test-secret"


class FakeBridge:
    """Answers every output field of the signature with '<field>:<first input value>'."""

    def __init__(self, fail_on: str | None = None, tool_result=None):
        self.calls: list[dict] = []
        self.tool_calls: list[dict] = []
        self.threads: set[int] = set()
        self.fail_on = fail_on
        self.tool_result = tool_result if tool_result is not None else [{"title": "t", "text": "hit"}]
        self.lock = threading.Lock()

    def predict(self, *, name, kind, signature, instructions, inputs):
        with self.lock:
            self.calls.append(dict(name=name, kind=kind, signature=signature, instructions=instructions,
                                   inputs=inputs))
            self.threads.add(threading.get_ident())
        if self.fail_on == name:
            raise ValueError(f"lm exploded in {name}")
        outs = [f.split(":")[0].strip() for f in signature.split("->")[1].split(",")]
        first = next(iter(inputs.values()), "")
        res = {o: f"{o}:{first}" for o in outs}
        if kind == "ChainOfThought":
            res["reasoning"] = "because"
        return res

    def tool(self, *, name, kwargs):
        with self.lock:
            self.tool_calls.append(dict(name=name, kwargs=kwargs))
            self.threads.add(threading.get_ident())
        return self.tool_result
