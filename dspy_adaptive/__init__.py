"""dspy_adaptive: Adaptive-GEPA as a DSPy optimizer.

`AdaptiveGEPA(metric, reflection_lm=...).compile(program, trainset=..., valset=...)` returns a
`RoutedProgram`: an LM router over a library of sandboxed specialist programs, with the user's
program as the frozen fallback.
"""

from dspy_adaptive.library import INACTIVE, Library, Slot

__all__ = ["INACTIVE", "Library", "Slot"]
