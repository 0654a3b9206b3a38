"""How a RoutedProgram stands in for the student it was built from, and sits inside a larger module.

* `StudentAttributes`: reading an attribute the routed program does not have (`routed.predictor`,
  `routed.hour_predictor`) reads its frozen fallback's -- the student's own attribute, on the program requests
  reach when they are not routed to a specialist. The routed program's own attributes always come first (this
  runs only when normal lookup fails; names its class defines, its own instance attributes `_OWN` and private
  names are never forwarded, so copies, pickles and half-built objects read nothing from a fallback). Setting such
  a student name on the routed program is refused, naming where to set it (`routed.fallback.<name>`), rather
  than creating an attribute that would shadow the fallback's and change nothing it runs.
* `_compiled` always reads False: dspy walks no submodule marked compiled, and a routed program must stay visible
  to the module holding it (its predictors reached by `set_lm` and optimizers, its library saved).
* `RoutedState`: the `library` parameter a RoutedProgram lists first in `named_parameters()`: its whole state as
  one parameter, so a larger module's `save` / `load` carry the library beside the predictors it lists (dspy
  loads parameters in the listed order, so the whole state is applied first).
"""

from __future__ import annotations

from typing import Any

import dspy
from dspy.predict.parameter import Parameter

#: A RoutedProgram's own instance attributes: never read from (nor refused for) the fallback.
_OWN = frozenset({"fallback", "router", "fast_lm", "deep_lm", "tools", "input_names", "callbacks", "history",
                  "detailed_results"})


def _on_class(cls: type, name: str) -> bool:
    return any(name in klass.__dict__ for klass in cls.__mro__)


class StudentAttributes:
    """Mixin of RoutedProgram: the student's attributes read through the fallback (see the module docstring)."""

    def __getattr__(self, name: str) -> Any:
        """Only for names this program does not have: a student attribute resolves to the fallback's."""
        fallback = self.__dict__.get("fallback")
        if name.startswith("_") or name in _OWN or _on_class(type(self), name) or fallback is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        try:
            return getattr(fallback, name)
        except AttributeError:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}, nor has its fallback "
                                 f"(the {type(fallback).__name__} it was built from)") from None

    def __setattr__(self, name: str, value: Any) -> None:
        fallback = self.__dict__.get("fallback")
        if (fallback is not None and not name.startswith("_") and name not in _OWN and name not in self.__dict__
                and not _on_class(type(self), name) and hasattr(fallback, name)):
            raise AttributeError(f"{name!r} is the fallback's (the student's): reading it on a RoutedProgram reads "
                                 f"the fallback's, so set it there, on `program.fallback.{name}`")
        super().__setattr__(name, value)

    @property
    def _compiled(self) -> bool:
        """Always False: dspy does not walk a submodule marked compiled, and a routed program must stay visible
        to the module holding it (its library saved, its predictors reached)."""
        return False

    @_compiled.setter
    def _compiled(self, value: bool) -> None:
        pass


class RoutedState(dspy.Module, Parameter):
    """The `library` parameter of a RoutedProgram: its whole state (`RoutedProgram.dump_state`) as one parameter,
    so a larger module's `save` / `load` carry the library beside the predictors it lists. Made when the
    parameters are listed, never stored. Its `lm` is the program's (setting it changes nothing: `set_lm` reaches
    the predictors themselves); `reset` keeps the library, as `RoutedProgram.reset` does."""

    def __init__(self, program: Any):
        super().__init__()
        self.__dict__["program"] = program     # not a submodule: no walk of this parameter reaches it twice

    @property
    def lm(self) -> Any:
        return self.program.lm

    @lm.setter
    def lm(self, lm: Any) -> None:
        pass

    def reset(self) -> None:
        pass

    def named_parameters(self):
        return []

    def dump_state(self, json_mode: bool = True) -> dict[str, Any]:
        return self.program.dump_state(json_mode=json_mode)

    def load_state(self, state: dict[str, Any], *, allow_unsafe_lm_state: bool = False) -> None:
        self.program.load_state(state, allow_unsafe_lm_state=allow_unsafe_lm_state)

    def forward(self, **kwargs: Any) -> Any:
        raise TypeError("a RoutedProgram's `library` parameter is its state, not a program: call the RoutedProgram")


__all__ = ["RoutedState", "StudentAttributes"]
