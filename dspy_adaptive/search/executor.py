"""Run step, the execution seam: where a batch of rows for one library is executed.

One small interface, `RowExecutor.run(library, rows) -> [RowResult]` (results in row order, with their
traces), and two implementations:

* `ThreadExecutor` (default): rows run on a thread pool in this process, exactly as before.
* `RayExecutor` (`executor="ray"`): long-lived Ray actors each hold the student, a warm sandbox pool and the
  LM clients, receive (library, rows) and return row results (see `ray_executor`).

The budget, the cache, the run record and every decision stay with the caller (the Evaluator): an executor
only runs rows. A row the executor could not run at all comes back as a failed RowResult (scored
`failure_score`), never as a missing row.
"""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Protocol, Sequence

from dspy_adaptive.data import Row
from dspy_adaptive.program.library import Library
from dspy_adaptive.schema import RowResult

#: Scores one row with a program built for a library: (program, row) -> RowResult.
ScoreRow = Callable[[Any, Row], RowResult]


#: Called with each row's result as soon as it exists (the caller logs it at once: a kill hides nothing).
OnResult = Callable[[RowResult], None]


class RowExecutor(Protocol):
    def run(self, library: Library, rows: Sequence[Row], on_result: OnResult | None = None) -> list[RowResult]:
        """Results for `rows` (same order), each row run once; `on_result` sees each as it completes."""

    def close(self) -> None:
        """Release threads, actors and processes."""


class ThreadExecutor:
    """Rows on a thread pool in this process (one thread: in the calling thread)."""

    def __init__(self, program_for: Callable[[Library], Any], score_row: ScoreRow, num_threads: int = 1):
        self.program_for, self.score_row = program_for, score_row
        self.num_threads = max(1, num_threads)
        self._pool = ThreadPoolExecutor(max_workers=self.num_threads, thread_name_prefix="adaptive-eval") \
            if self.num_threads > 1 else None

    def run(self, library: Library, rows: Sequence[Row], on_result: OnResult | None = None) -> list[RowResult]:
        program = self.program_for(library)

        def one(row: Row) -> RowResult:
            res = self.score_row(program, row)
            if on_result is not None:
                on_result(res)
            return res

        if self._pool is None or len(rows) == 1:
            return [one(r) for r in rows]
        futures = [self._pool.submit(contextvars.copy_context().run, one, r) for r in rows]
        return [f.result() for f in futures]

    def close(self, wait: bool = True) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=not wait)


__all__ = ["OnResult", "RowExecutor", "ScoreRow", "ThreadExecutor"]
