"""dspy_adaptive: Adaptive-GEPA as a DSPy optimizer.

`AdaptiveGEPA(metric, reflection_lm=...).compile(program, trainset=..., valset=...)` returns a
`RoutedProgram`: an LM router over a library of sandboxed specialist programs, with the user's
program as the frozen fallback.
"""

from dspy_adaptive.library import INACTIVE, Library, Slot
from dspy_adaptive.oeo import OpenEndedOptimizer
from dspy_adaptive.profiles import Profiles, profiles_from
from dspy_adaptive.results import AdaptiveGEPAResult, load_run
from dspy_adaptive.routed_program import RoutedProgram, RouteRecord, SpecialistRuntimeError, route_of
from dspy_adaptive.teleprompter import AdaptiveGEPA, SandboxSettings

__all__ = ["AdaptiveGEPA", "AdaptiveGEPAResult", "INACTIVE", "Library", "OpenEndedOptimizer", "Profiles",
           "RouteRecord", "RoutedProgram", "SandboxSettings", "Slot", "SpecialistRuntimeError", "load_run",
           "profiles_from", "route_of"]
