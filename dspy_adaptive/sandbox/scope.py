"""What the host runs a specialist's bridged calls under: a response cache of the request's own, and
bounded logs.

The LM response cache is a channel: DSPy keeps one process-wide cache (memory and disk) for every LM
call -- the metric's LM judge (whose prompt holds the reference answer), the fallback, the router,
other requests, earlier runs. A specialist that could hit it would learn, from a cached answer's
content or from how fast it came back, what another party asked. So every DSPy LM call made on a
specialist's behalf -- its predictors, and tools that call LMs -- runs inside a `RequestScope`: while
the scope is active in a thread (a context variable), `dspy.cache` reads and writes that request's
own memory cache and nothing else; it is dropped with the request. The only cache hit a specialist
can observe is one for a call it made itself, earlier in the same request. Outside a scope -- the
metric and its judges, the fallback, the router, reflection -- `dspy.cache` is DSPy's own, as
configured, untouched.

Mechanics: `dspy.cache` is replaced, once, by `_ScopedCache`, which forwards everything to the cache
it wraps unless a scope is active (`dspy.configure_cache` later installs a new cache; the next
bridged call wraps that one). `dspy.context(warn_on_type_mismatch=False)` applies too (the bridge
checks declared types itself, and DSPy's warning would log the whole value).

Logs: while a scope is active, every log record created in that thread (any logger: DSPy, LiteLLM,
yours) has its message, arguments and traceback text cut to `LOG_LIMIT` characters, so nothing a
specialist sends can reach a host log unbounded.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import traceback
from typing import Any, Iterator

import dspy
from dspy.clients.cache import Cache

LOG_LIMIT = 2000
REQUEST_CACHE_ENTRIES = 1000
_SCOPE: contextvars.ContextVar["RequestScope | None"] = contextvars.ContextVar("adaptive_request_scope", default=None)
_install_lock = threading.Lock()


class RequestScope:
    """One request's own LM response cache (memory only, bounded); see the module docstring."""

    def __init__(self) -> None:
        self.cache = Cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir=None,
                           memory_max_entries=REQUEST_CACHE_ENTRIES)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        install()
        token = _SCOPE.set(self)
        try:
            with dspy.context(warn_on_type_mismatch=False):
                yield
        finally:
            _SCOPE.reset(token)


def current() -> RequestScope | None:
    return _SCOPE.get()


class _ScopedCache:
    """Stands in for `dspy.cache`: the active request's cache inside a scope, the wrapped one outside."""

    def __init__(self, inner: Any):
        object.__setattr__(self, "_inner", inner)

    def _target(self) -> Any:
        scope = _SCOPE.get()
        if scope is not None:
            return scope.cache
        inner = object.__getattribute__(self, "_inner")
        if inner is None:            # DSPy had not built its default cache yet: build it as DSPy would
            from dspy.clients import _get_dspy_cache

            with _install_lock:
                inner = object.__getattribute__(self, "_inner")
                if inner is None:
                    inner = _get_dspy_cache()
                    object.__setattr__(self, "_inner", inner)
        return inner

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self._target().get(*args, **kwargs)

    def put(self, *args: Any, **kwargs: Any) -> Any:
        return self._target().put(*args, **kwargs)

    def __contains__(self, key: str) -> bool:
        return key in self._target()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target(), name, value)


def install() -> None:
    """Wrap `dspy.cache` (and install the bounded log record factory) unless already done."""
    current_cache = vars(dspy).get("cache")
    if not isinstance(current_cache, _ScopedCache):
        with dspy._cache_lock:   # the lock DSPy's lazy build and configure_cache hold
            current_cache = vars(dspy).get("cache")
            if not isinstance(current_cache, _ScopedCache):
                dspy.cache = _ScopedCache(current_cache)
    if logging.getLogRecordFactory() is not _bounded_factory:
        with _install_lock:
            factory = logging.getLogRecordFactory()
            if factory is not _bounded_factory:
                _BASE[0] = factory
                logging.setLogRecordFactory(_bounded_factory)


_BASE: list = [logging.LogRecord]


def _bounded_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = _BASE[0](*args, **kwargs)
    if _SCOPE.get() is not None:
        bound_record(record)
    return record


def _cut(text: str) -> str:
    if len(text) <= LOG_LIMIT:
        return text
    return text[:LOG_LIMIT] + f"... [{len(text) - LOG_LIMIT} characters cut: data from a sandboxed program]"


def bound_record(record: logging.LogRecord) -> None:
    """Cut a record's message (formatted with its arguments), traceback and stack text to LOG_LIMIT."""
    try:
        msg = record.getMessage()
    except Exception:  # noqa: BLE001 - a record whose arguments do not format: keep its template only
        msg = str(record.msg)
    record.msg, record.args = _cut(msg), None
    if record.exc_info:
        try:
            text = "".join(traceback.format_exception(*record.exc_info))
        except Exception:  # noqa: BLE001
            text = ""
        record.exc_text, record.exc_info = _cut(text.rstrip("\n")), None
    if record.stack_info:
        record.stack_info = _cut(record.stack_info)
