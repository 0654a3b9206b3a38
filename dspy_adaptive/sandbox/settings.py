"""How specialist programs run: the sandbox's settings, validated here, and the pool they build."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .pool import ISOLATION_MODES, SandboxPool


@dataclass(frozen=True)
class SandboxSettings:
    """How specialist programs run (see the README's safety model).

    Args:
        timeout: seconds one specialist call may compute in its worker; also its CPU limit.
        call_timeout: seconds one specialist call may take in all, its LM and tool calls included (default:
            `timeout`: a call never takes longer than its timeout). A hard deadline: the call ends then even
            if one of its LM or tool calls has not (raise it for slow LMs, e.g. thinking models).
        memory_mb: address-space limit of a worker process.
        max_predictor_calls: LM calls one specialist call may make (tool calls: the same number).
        isolation: "warn" (default) runs with the OS isolation this host offers and warns about the
            rest; "strict" refuses to start a search unless every layer (per-worker uid on root hosts,
            Landlock, seccomp, an empty network namespace) holds here.
    """

    timeout: float = 60.0
    call_timeout: float | None = None
    memory_mb: int = 1024
    max_predictor_calls: int = 100
    isolation: str = "warn"

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATION_MODES:
            raise ValueError(f"SandboxSettings.isolation must be 'warn' or 'strict', got {self.isolation!r}")
        for name in ("timeout", "call_timeout"):
            value = getattr(self, name)
            if name == "call_timeout" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"SandboxSettings.{name} must be a positive number of seconds, got {value!r}")
        for name in ("memory_mb", "max_predictor_calls"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SandboxSettings.{name} must be a positive integer, got {value!r}")

    def pool(self, *, max_workers: int, tool_names: Sequence[str]) -> SandboxPool:
        """A pool with these limits, running at most `max_workers` specialist calls at once."""
        return SandboxPool(max_workers=max_workers, timeout=self.timeout, call_timeout=self.call_timeout,
                           memory_mb=self.memory_mb, max_predictor_calls=self.max_predictor_calls,
                           tool_names=tuple(tool_names), isolation=self.isolation)
