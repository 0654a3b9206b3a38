"""Sandbox for specialist programs (DESIGN.md §2, "Specialist programs are code").

Layers, each meant to hold when the others fail:
  host bridge  (bridge.py, signature.py, reserved.py) nothing a specialist sends is evaluated on the host:
               strict signature grammar, declared inputs only, no field named after a DSPy predictor
               argument, values of their declared types, plain JSON, caps, errors in our own words;
  request scope (scope.py) a request's own LM response cache and bounded logs for every bridged call;
  policy       (allowlist.py, policy.py, cleanroom.py, runtime.py) static check + RestrictedPython,
               one allow-list of module names, guards and shim built without module globals;
  limits       (isolation.set_rlimits, exchange.py) memory, CPU, no files written, no processes; every read
               and write with the host bounded by the call's deadline, protocol violations fatal;
  OS isolation (isolation.py) per-worker uid, Landlock, seccomp, empty network namespace;
  lifetime     (pool.py, supply.py, zygote.py, worker.py) one fresh process per request, forked from a warm
               zygote and confined before its request arrives; workers die with their host.

Modules: compiler.py (CompiledProgram, CompileResult), protocol.py (framing), exchange.py (one call's
exchange), supply.py (workers prepared ahead), forkserver.py (host side of the zygote), errors.py
(SpecialistError), testing.py (test doubles: full-Python and policy-bypassing runs, FakeBridge),
bench.py (`python -m dspy_adaptive.sandbox.bench`).
"""

from .allowlist import ALLOWED_MODULES, ALLOWED_NAMES
from .bridge import (
    BridgeLimits,
    BridgeRefused,
    PredictorBridge,
    PredictorCache,
    PredictRequest,
    ToolCall,
    ToolRequest,
    attach_tool_calls,
    tool_calls_of,
)
from .compiler import CompiledProgram, CompileResult, compile_program
from .errors import SpecialistError
from .layers import Layers
from .policy import check
from .pool import HostBridge, IsolationReport, RunResult, SandboxIsolationError, SandboxPool

__all__ = ["ALLOWED_MODULES", "ALLOWED_NAMES", "BridgeLimits", "BridgeRefused", "CompileResult", "CompiledProgram",
           "HostBridge", "IsolationReport", "Layers", "PredictRequest", "PredictorBridge", "PredictorCache",
           "RunResult", "SandboxIsolationError", "SandboxPool", "SpecialistError", "ToolCall", "ToolRequest",
           "attach_tool_calls", "check", "compile_program", "tool_calls_of"]
