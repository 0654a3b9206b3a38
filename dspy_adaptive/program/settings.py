"""What the routed program is made of, apart from the user's program: K slots, the two LM profiles and the
tools specialists may call; validated here, and the base program a run searches with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import dspy

from dspy_adaptive import checks
from dspy_adaptive.program.library import Library
from dspy_adaptive.program.route_memo import RouteMemo
from dspy_adaptive.program.routed import RoutedProgram, normalise_tools
from dspy_adaptive.sandbox import SandboxPool


@dataclass(frozen=True)
class ProgramSettings:
    """Args:
        max_specialists: K, the number of specialist slots.
        fast_lm: the LM of the "fast" profile; the router always uses it (None: the configured LM).
            `fast_lm, deep_lm = dspy_adaptive.profiles_from(actor_lm)` builds both from one actor with the
            paper's settings (Appendix B: thinking off/on, temperature 0.3/0.6, 4,096/8,192 tokens).
        deep_lm: the LM of the "deep" profile; the fallback always uses it (None: the configured LM). A
            specialist runs on the profile its source declares (`PROFILE = "fast" | "deep"`), else on the one
            chosen when its slot was activated.
        tools: functions specialists may call by name (a mapping name -> function, or functions named by
            their `__name__`).
    """

    max_specialists: int = 5
    fast_lm: Any = None
    deep_lm: Any = None
    tools: Mapping[str, Callable] | Sequence[Callable] | None = None

    def __post_init__(self) -> None:
        checks.integer("max_specialists (K_max)", self.max_specialists)
        object.__setattr__(self, "tools", normalise_tools(self.tools))   # bad names or non-callables raise now

    def base(self, student: dspy.Module, *, input_names: Sequence[str], sandbox: SandboxPool,
             route_memo: RouteMemo | None) -> RoutedProgram:
        """The run's base program: `student` as the fallback over an empty library of K slots, running
        specialists in `sandbox` (which the caller owns)."""
        return RoutedProgram(student, Library.empty(self.max_specialists), fast_lm=self.fast_lm, deep_lm=self.deep_lm,
                             tools=self.tools, input_names=input_names, sandbox=sandbox, owns_sandbox=False,
                             route_memo=route_memo)
