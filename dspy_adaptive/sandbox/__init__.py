"""Sandbox for specialist programs (DESIGN.md §2, "Specialist programs are code").

Layers: static policy (`check`, nothing runs) -> host-side compile (`compile_program`, pure,
cached) -> warm isolated worker processes (`SandboxPool.run`) executing RestrictedPython code
with a dspy shim whose predictor calls are bridged back to the calling host thread.

Modules: policy.py (static rules + RestrictedPython transformer), compiler.py (CompiledProgram,
CompileResult), runtime.py (in-worker guards, builtins, module proxies, dspy shim), worker.py
(the worker process), zygote.py + forkserver.py (workers forked from a warm image), protocol.py (framing), pool.py (SandboxPool), errors.py
(SpecialistError), bench.py (`python -m dspy_adaptive.sandbox.bench`).
"""

from .compiler import CompiledProgram, CompileResult, compile_program
from .errors import SpecialistError
from .policy import ALLOWED_MODULES, check
from .pool import HostBridge, RunResult, SandboxPool

__all__ = ["ALLOWED_MODULES", "CompileResult", "CompiledProgram", "HostBridge", "RunResult",
           "SandboxPool", "SpecialistError", "check", "compile_program"]
