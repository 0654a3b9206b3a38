"""Sandbox for specialist programs (DESIGN.md §2, "Specialist programs are code").

Layers, each meant to hold when the others fail:
  host bridge  (bridge.py, signature.py) nothing a specialist sends is evaluated on the host: strict
               signature grammar, declared inputs only, plain JSON, caps, errors in our own words;
  policy       (allowlist.py, policy.py, cleanroom.py, runtime.py) static check + RestrictedPython,
               one allow-list of module names, guards and shim built without module globals;
  limits       (isolation.set_rlimits) memory, CPU, no files written, no processes, wall-clock timeouts;
  OS isolation (isolation.py) per-worker uid, Landlock, seccomp, empty network namespace;
  lifetime     (pool.py, zygote.py, worker.py) one fresh process per request, forked from a warm zygote.

Modules: compiler.py (CompiledProgram, CompileResult), protocol.py (framing), forkserver.py (host side
of the zygote), errors.py (SpecialistError), bench.py (`python -m dspy_adaptive.sandbox.bench`).
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
