"""The search's memo of router decisions, owned by the routed program that routes with it.

During a search the same router text and descriptions route the same request many times (the parent's
minibatch, the child's, every validation). The router prompt is then identical, so a memo per (router text,
active descriptions, request) gives what DSPy's LM cache would (the paper's runs kept actor caching on)
without re-running the adapter. A program and every `with_library` variant made from it share one memo; the
program a search returns has none (a deployed RoutedProgram calls its router every time).
"""

from __future__ import annotations

import json
import threading
from typing import Any, Mapping

#: (router text, rendered active descriptions, request as canonical JSON)
MemoKey = tuple[str, str, str]
#: (the slot parsed from the router's answer or None, the raw answer)
Decision = tuple["int | None", "str | None"]


class RouteMemo:
    """Thread-safe router decisions by (router text, descriptions, request)."""

    def __init__(self, decisions: Mapping[MemoKey, Decision] | None = None):
        self._decisions: dict[MemoKey, Decision] = dict(decisions or {})
        self._lock = threading.Lock()

    @staticmethod
    def key(router: str, specialists: str, inputs: Mapping[str, Any]) -> MemoKey:
        return (router, specialists, json.dumps(dict(inputs), sort_keys=True, default=str))

    def get(self, key: MemoKey) -> Decision | None:
        with self._lock:
            return self._decisions.get(key)

    def put(self, key: MemoKey, decision: Decision) -> None:
        with self._lock:
            self._decisions[key] = decision

    def update(self, decisions: Mapping[MemoKey, Decision]) -> None:
        """Decisions made elsewhere (a Ray actor's, returned with its rows)."""
        with self._lock:
            self._decisions.update(decisions)

    def for_router(self, router: str, specialists: str) -> dict[MemoKey, Decision]:
        """The decisions a library with this router text and these descriptions can hit."""
        with self._lock:
            return {k: v for k, v in self._decisions.items() if k[0] == router and k[1] == specialists}

    def snapshot(self) -> dict[MemoKey, Decision]:
        with self._lock:
            return dict(self._decisions)

    def __len__(self) -> int:
        with self._lock:
            return len(self._decisions)
