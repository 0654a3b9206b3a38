"""What `compile(student, trainset=..., teacher=..., valset=...)` accepts, checked the same way for every
optimizer of the package before anything is built: clear errors that say what to fix."""

from __future__ import annotations

from typing import Any, Mapping

import dspy

from dspy_adaptive.data import InputError, Row, input_keys, make_rows
from dspy_adaptive.optimizers.gepa_compat import EmptyTrainsetError


class UnknownArgumentError(InputError, TypeError):
    """An argument the method does not take (a TypeError too, as Python raises for one)."""


def compile_rows(optimizer: str, student: Any, trainset: Any, teacher: Any, valset: Any,
                 kwargs: Mapping[str, Any]) -> tuple[tuple[Row, ...], tuple[Row, ...]]:
    """(train rows, validation rows) of a compile call, or a clear error. `valset` None: the trainset."""
    if kwargs:
        raise UnknownArgumentError(
            f"{optimizer}.compile() got unexpected keyword argument(s) {', '.join(map(repr, sorted(kwargs)))}: it "
            "takes student, trainset, teacher (must be None) and valset, as dspy.GEPA.compile does. Optimizer "
            f"settings belong to {optimizer}(...).")
    if teacher is not None:
        raise InputError(f"{optimizer} does not use a teacher program (neither does dspy.GEPA): pass teacher=None")
    if not isinstance(student, dspy.Module):
        raise InputError(f"student must be a dspy.Module (it becomes the frozen fallback), "
                         f"got {type(student).__name__}")
    if trainset is None:   # an AssertionError too, as dspy.GEPA's `assert` raises
        raise EmptyTrainsetError("trainset is None: pass a non-empty list of dspy.Example objects")
    if hasattr(trainset, "__len__") and not isinstance(trainset, (str, bytes)) and len(trainset) == 0:
        raise EmptyTrainsetError("trainset is empty: pass at least one dspy.Example (the feedback set "
                                 "reflection reads)")
    train = make_rows(trainset, "trainset")
    val = make_rows(valset, "valset") if valset is not None else train
    if input_keys(train) != input_keys(val) and set(input_keys(train)) != set(input_keys(val)):
        raise InputError(f"trainset inputs {input_keys(train)} differ from valset inputs {input_keys(val)}")
    return train, val
