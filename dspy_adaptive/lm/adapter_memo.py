"""System-message memo for the LM calls a RoutedProgram makes (router, specialists, fallback).

DSPy's adapters rebuild the system message (field descriptions, field structure, task description)
from the signature on every call, building a pydantic TypeAdapter per field on the way: about a
quarter of a `dspy.Predict` call's CPU (0.26 -> 0.20 ms per call with a scripted LM here). For
DSPy's own adapters that message is a function of the signature alone, and the signatures a
RoutedProgram runs are cached objects (one per router text, one per specialist predictor), so a
per-signature memo gives byte-identical messages for less. Any other adapter class -- a user's
subclass may format from its own state -- is used exactly as configured.

Why not in DSPy: `Adapter.format` calls `self.format_system_message(signature)` and offers no cache;
we shadow that one method on a shallow copy of the configured adapter, so every other attribute and
behaviour (callbacks, JSON fallback, native function calling) is the configured adapter's.
"""

from __future__ import annotations

import copy
import functools
import threading
import weakref
from typing import Any

import dspy

_STOCK = (dspy.ChatAdapter, dspy.JSONAdapter, dspy.XMLAdapter)
_lock = threading.Lock()
_memos: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def lm_context(lm: Any):
    """`dspy.context` for one of the optimizer's LM calls: `lm`, under the `memoized` form of the
    configured adapter."""
    return dspy.context(lm=lm, adapter=memoized(dspy.settings.adapter))


def memoized(adapter: Any) -> Any:
    """The adapter to run under: `adapter` itself unless it is exactly one of DSPy's stock adapters (or
    None, DSPy's default ChatAdapter), in which case a copy that memoises its system message per
    signature object. One copy per configured adapter, so the memo lives as long as that adapter."""
    if adapter is None:
        return _default()
    if type(adapter) not in _STOCK:
        return adapter
    with _lock:
        memo = _memos.get(adapter)
        if memo is None:
            memo = _memos[adapter] = _with_memo(adapter)
        return memo


@functools.cache
def _default() -> Any:
    """The memoised stand-in for "no adapter configured" (DSPy then uses a ChatAdapter())."""
    return _with_memo(dspy.ChatAdapter())


def _with_memo(adapter: Any) -> Any:
    memo = copy.copy(adapter)
    build = type(adapter).format_system_message.__get__(memo)
    messages: "weakref.WeakKeyDictionary[type, str]" = weakref.WeakKeyDictionary()

    def format_system_message(signature: type[dspy.Signature]) -> str:
        try:
            return messages[signature]
        except (KeyError, TypeError):   # TypeError: not weak-referenceable (never a Signature class)
            pass
        text = build(signature)
        try:
            messages[signature] = text
        except TypeError:
            pass
        return text

    memo.format_system_message = format_system_message
    return memo
