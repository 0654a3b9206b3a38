"""Where and how rows run: threads or Ray actors, how many, and the search's router-decision memo."""

from __future__ import annotations

from dataclasses import dataclass

import dspy

from dspy_adaptive import checks
from dspy_adaptive.data import InputError

EXECUTORS = ("threads", "ray")


@dataclass(frozen=True)
class ExecutionSettings:
    """Args:
        num_threads: rows scored in parallel (None: `dspy.settings.num_threads`, else 1).
        executor: where rows run: "threads" (a thread pool in this process; the default unless `address` is
            given) or "ray" (long-lived Ray actors, `num_threads` of them, each holding the student, a warm sandbox
            pool and the LM clients; needs the ray extra). The budget, cache, archive and every decision stay in
            this process.
        address: a Ray cluster address (e.g. "ray://head:10001" or "auto"); giving one means executor="ray".
            With executor="ray" and no address, a running Ray is joined, else a local one is started.
        route_memo: during the search, memoise router decisions per (router, descriptions, request), as DSPy's LM
            cache would (`program.route_memo`); the returned program does not memoise.
    """

    num_threads: int | None = None
    executor: str | None = None
    address: str | None = None
    route_memo: bool = True

    def __post_init__(self) -> None:
        checks.integer("num_threads", self.num_threads, optional=True)
        if self.executor is None:
            object.__setattr__(self, "executor", "ray" if self.address is not None else "threads")
        checks.one_of("executor", self.executor, EXECUTORS)
        if self.address is not None and self.executor != "ray":
            raise InputError(f'address={self.address!r} runs rows on Ray, but executor="threads" was given: '
                             "drop one")
        if self.executor == "ray":
            from dspy_adaptive.search.ray_executor import require_ray
            require_ray()                  # a clear error now, before any LM money is spent

    def threads(self) -> int:
        """The number of rows scored at once, resolved now (dspy.settings may have changed since)."""
        return self.num_threads or dspy.settings.num_threads or 1
