"""dspy_adaptive: Adaptive-GEPA as a DSPy optimizer.

`AdaptiveGEPA(metric, reflection_lm=...).compile(program, trainset=..., valset=...)` returns a
`RoutedProgram`: an LM router over a library of sandboxed specialist programs, with the user's
program as the frozen fallback.
"""

from dspy_adaptive import _moved
from dspy_adaptive.optimizers.adaptive_gepa import AdaptiveGEPA, SandboxSettings
from dspy_adaptive.optimizers.oeo import OpenEndedOptimizer
from dspy_adaptive.program.library import INACTIVE, Library, Slot
from dspy_adaptive.program.profiles import Profiles, profiles_from
from dspy_adaptive.program.routed import RoutedProgram, RouteRecord, SpecialistRuntimeError, route_of
from dspy_adaptive.record.run_record import AdaptiveGEPAResult, load_run

_moved.install()   # old import paths of moved modules keep working for one release

__all__ = ["AdaptiveGEPA", "AdaptiveGEPAResult", "INACTIVE", "Library", "OpenEndedOptimizer", "Profiles",
           "RouteRecord", "RoutedProgram", "SandboxSettings", "Slot", "SpecialistRuntimeError", "load_run",
           "profiles_from", "route_of"]
