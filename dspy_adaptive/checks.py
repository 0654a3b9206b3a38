"""The checks every settings group runs on itself, with one wording: what was given and what is allowed.

Each raises `InputError` (a ValueError; raised before any LM call) naming the parameter as the user typed it.
"""

from __future__ import annotations

from typing import Any, Iterable

from dspy_adaptive.data import InputError


def integer(name: str, value: Any, *, minimum: int = 1, optional: bool = False, none_means: str = "") -> None:
    """`value` is an int (not a bool) >= minimum; with `optional`, None is allowed too."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        also = f" or None ({none_means})" if optional and none_means else " or None" if optional else ""
        what = f"a positive integer{also} (an integer >= 1)" if minimum == 1 else f"an integer >= {minimum}{also}"
        raise InputError(f"{name} must be {what}, got {value!r}")


def one_of(name: str, value: Any, choices: Iterable[Any]) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise InputError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")


def positive_number(name: str, value: Any, *, optional: bool = False, unit: str = "") -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InputError(f"{name} must be a positive number{' of ' + unit if unit else ''}"
                         f"{' or None' if optional else ''}, got {value!r}")


def callable_or_none(name: str, value: Any, what: str) -> None:
    if value is not None and not callable(value):
        raise InputError(f"{name} must be callable ({what}), got {type(value).__name__}")
