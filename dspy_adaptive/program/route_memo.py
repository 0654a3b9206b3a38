"""The search's memo of router decisions, owned by the routed program that routes with it.

During a search the same router text and descriptions route the same request many times (the parent's
minibatch, the child's, every validation). The router prompt is then identical, so a memo per (router text,
active descriptions, request) gives what DSPy's LM cache would (the paper's runs kept actor caching on)
without re-running the adapter. A program and every `with_library` variant made from it share one memo; the
program a search returns has none (a deployed RoutedProgram calls its router every time).

A search with a log_dir journals every new decision (`journal`, `search.checkpoint`'s routes log) and a resumed
run starts from them: the decisions the interrupted session paid for are not asked of the router again (with
DSPy's cache off, or a router sampled at temperature, a resumed run would otherwise pay for them twice and
could route a request differently than the session it continues). Keys hold digests of the router text and
the descriptions, so a journal line stays small.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any, Callable, Mapping

#: (digest of the router text, digest of the rendered active descriptions, request as canonical JSON)
MemoKey = tuple[str, str, str]
#: (the slot parsed from the router's answer or None, the raw answer)
Decision = tuple["int | None", "str | None"]
#: told of every decision the memo did not hold (the run's journal)
Journal = Callable[[MemoKey, Decision], None]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class RouteMemo:
    """Thread-safe router decisions by (router text, descriptions, request). `journal`, if given, is called
    with each decision the memo did not hold yet (not with those it starts from)."""

    def __init__(self, decisions: Mapping[MemoKey, Decision] | None = None, journal: Journal | None = None):
        self._decisions: dict[MemoKey, Decision] = dict(decisions or {})
        self._lock = threading.Lock()
        self._journal = journal

    @staticmethod
    def key(router: str, specialists: str, inputs: Mapping[str, Any]) -> MemoKey:
        return (digest(router), digest(specialists), json.dumps(dict(inputs), sort_keys=True, default=str))

    def get(self, key: MemoKey) -> Decision | None:
        with self._lock:
            return self._decisions.get(key)

    def put(self, key: MemoKey, decision: Decision) -> None:
        self.update({key: decision})

    def update(self, decisions: Mapping[MemoKey, Decision]) -> None:
        """Decisions made here, or elsewhere (a Ray actor's, returned with its rows)."""
        with self._lock:
            new = {k: tuple(v) for k, v in decisions.items() if k not in self._decisions}
            self._decisions.update(new)
        if self._journal is not None:   # outside the lock (a file append): each decision is new to one caller only
            for k, v in new.items():
                self._journal(k, v)

    def for_router(self, router: str, specialists: str) -> dict[MemoKey, Decision]:
        """The decisions a library with this router text and these descriptions can hit."""
        r, s = digest(router), digest(specialists)
        with self._lock:
            return {k: v for k, v in self._decisions.items() if k[0] == r and k[1] == s}

    def snapshot(self) -> dict[MemoKey, Decision]:
        with self._lock:
            return dict(self._decisions)

    def __len__(self) -> int:
        with self._lock:
            return len(self._decisions)
