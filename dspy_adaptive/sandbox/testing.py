"""Test doubles for the sandbox: ways to run code in a pool's workers that production never uses.

The pool only ever runs what `compile_program` produced (the static policy passed, RestrictedPython
compiled it). To show that each *other* layer holds on its own, the tests and the red team
(`benchmarks.hardening`) run code past those layers:

* `run_unchecked(pool, source, ...)`: full Python in the worker -- real builtins, real `os`, `socket`,
  `ctypes` -- so only the OS layers (rlimits, uid, Landlock, seccomp, netns) and the host bridge stand;
* `run_bypassing_policy(pool, source, ...)`: RestrictedPython's compile and the restricted runtime, but
  not our static policy (what a policy bug would let through);
* `run_code(pool, code, ...)`: arbitrary marshalled bytes as the program (the worker's own check of
  what it is sent).

`FakeBridge` answers predictor and tool requests without an LM; `unchecked(body)` writes a full-Python
specialist around a `forward` body.
"""

from __future__ import annotations

import marshal
import threading
from typing import Any, Mapping

import dspy

from . import policy
from .compiler import source_hash
from .errors import SpecialistError
from .pool import Job, RunResult, SandboxPool


def run_unchecked(pool: SandboxPool, source: str, inputs: Mapping, bridge: Any = None,
                  class_name: str = "Solver") -> RunResult:
    """Run `source` with full builtins (policy and RestrictedPython bypassed) to test the other layers alone."""
    code = marshal.dumps(compile(source, policy.FILENAME, "exec", dont_inherit=True))
    return pool._execute(Job(code, class_name, "unchecked-" + source_hash(source), restricted=False), inputs, bridge)


def run_bypassing_policy(pool: SandboxPool, source: str, inputs: Mapping, bridge: Any = None,
                         class_name: str = "Solver") -> RunResult:
    """Run `source` compiled by RestrictedPython alone (our static policy skipped), on the restricted runtime."""
    code, errors = policy.restricted_compile(source)
    if code is None:
        raise SpecialistError("does not compile: " + "; ".join(errors), "policy")
    return pool._execute(Job(marshal.dumps(code), class_name, "bypass-" + source_hash(source)), inputs, bridge)


def run_code(pool: SandboxPool, code: bytes, inputs: Mapping, bridge: Any = None,
             class_name: str = "Solver") -> RunResult:
    """Send `code` as the program's marshalled code object, whatever it holds."""
    return pool._execute(Job(code, class_name, "forged-" + source_hash(repr(code))), inputs, bridge)


def unchecked(body: str, args: str = "", imports: str = "os, sys") -> str:
    """A specialist with full Python (for `run_unchecked`), whose forward runs `body`."""
    lines = "\n".join("        " + line for line in body.strip("\n").splitlines())
    return (f"import {imports}\n\nclass Solver(dspy.Module):\n"
            f"    def forward(self{', ' + args if args else ''}):\n{lines}\n")


class FakeBridge:
    """Answers every output field of the signature with '<field>:<first input value>'; records every call."""

    def __init__(self, fail_on: str | None = None, tool_result: Any = None):
        self.calls: list[dict] = []
        self.tool_calls: list[dict] = []
        self.threads: set[int] = set()
        self.contexts: set[int] = set()   # id() of the DSPy trace each call saw (the caller's context)
        self.fail_on = fail_on
        self.tool_result = tool_result if tool_result is not None else [{"title": "t", "text": "hit"}]
        self.lock = threading.Lock()

    def predict(self, request):
        name, kind, inputs = request.name, request.kind, dict(request.inputs)
        with self.lock:
            self.calls.append(dict(name=name, kind=kind, signature=request.signature.text,
                                   instructions=request.instructions, inputs=inputs))
            self.threads.add(threading.get_ident())
            self.contexts.add(id(dspy.settings.trace))
        if self.fail_on == name:
            raise ValueError(f"lm exploded in {name}")
        first = next(iter(inputs.values()), "")
        res = {o: f"{o}:{first}" for o in request.signature.output_names}
        if kind == "ChainOfThought":
            res["reasoning"] = "because"
        return res

    def tool(self, request):
        with self.lock:
            self.tool_calls.append(dict(name=request.name, kwargs=dict(request.kwargs)))
            self.threads.add(threading.get_ident())
        return self.tool_result
