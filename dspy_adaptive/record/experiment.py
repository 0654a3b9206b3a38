"""Score a split: the one routine that runs a program on a split's requests and scores each through
`program.scoring.score_example` (a failed rollout or metric scores `failure_score`, as in the search), used by
the demo, the benchmarks' test and selection phases and the baselines. `compare` pairs two scored splits by
request and hands them to the one statistics routine (`record.paired.paired_comparison`).

    seed = score_split(base, test, metric, num_threads=4)
    optimized = score_split(routed, test, metric, num_threads=4)
    comparison = compare(seed, optimized)          # paired interval, signed-rank p, d_z, wins/ties/losses
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import dspy

from dspy_adaptive.data import example_id
from dspy_adaptive.program.scoring import score_example
from dspy_adaptive.record.paired import PairedComparison, paired_comparison
from dspy_adaptive.schema import RowResult


@dataclass(frozen=True)
class ScoredRequest:
    """One request of a split: its attempts (one RowResult each) and their mean score (pass@1 over attempts)."""

    id: str
    family: str | None
    attempts: tuple[RowResult, ...]

    @property
    def score(self) -> float:
        return sum(a.score for a in self.attempts) / len(self.attempts)

    @property
    def executed(self) -> int | None:
        """The slot the first attempt ran."""
        return self.attempts[0].executed

    @property
    def errors(self) -> list[str]:
        return [a.error or f"metric failed: {a.metric_note}" for a in self.attempts if a.error or a.metric_note]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "family": self.family, "score": self.score, "executed": self.executed,
                "attempts": [a.score for a in self.attempts], "routes": [a.executed for a in self.attempts],
                "errors": self.errors}


def score_split(program: Any, examples: Sequence[dspy.Example], metric: Callable, *, num_threads: int = 1,
                attempts: Callable[[dspy.Example], int] = lambda ex: 1,
                program_for: Callable[[dspy.Example, int], Any] | None = None, failure_score: float = 0.0,
                progress: bool = False, timeout: int | None = None) -> list[ScoredRequest]:
    """Each example scored `attempts(example)` times (in parallel, DSPy's ParallelExecutor) by `program` -- or by
    `program_for(example, attempt)` where the program depends on the request -- in the examples' order."""
    from dspy.utils.parallelizer import ParallelExecutor

    items = [(ex, a) for ex in examples for a in range(max(1, attempts(ex)))]

    def one(item: tuple[dspy.Example, int]) -> RowResult:
        ex, attempt = item
        runner = program_for(ex, attempt) if program_for is not None else program
        return score_example(runner, ex, metric, row_id=example_id(ex), failure_score=failure_score)

    results = ParallelExecutor(num_threads=max(1, num_threads), disable_progress_bar=not progress,
                               max_errors=10 ** 9, timeout=timeout or 1800).execute(one, items)
    by_id: dict[str, list[RowResult]] = {}
    for (ex, _), res in zip(items, results):
        by_id.setdefault(example_id(ex), []).append(res)
    return [ScoredRequest(example_id(ex), ex.get("family"), tuple(by_id[example_id(ex)])) for ex in _unique(examples)]


def compare(reference: Sequence[ScoredRequest | Any], method: Sequence[ScoredRequest | Any],
            **kwargs: Any) -> PairedComparison:
    """`method` against `reference`, paired by request id (requests in only one are left out); kwargs go to
    `paired_comparison` (confidence, min_pairs, seed, ...). Rows may be ScoredRequests or dicts with id/score."""
    ref = {_field(r, "id"): _field(r, "score") for r in reference}
    pairs = [(ref[_field(r, "id")], _field(r, "score")) for r in method if _field(r, "id") in ref]
    return paired_comparison([a for a, _ in pairs], [b for _, b in pairs], **kwargs)


def _unique(examples: Sequence[dspy.Example]) -> list[dspy.Example]:
    seen, out = set(), []
    for ex in examples:
        if example_id(ex) not in seen:
            seen.add(example_id(ex))
            out.append(ex)
    return out


def _field(row: Any, name: str) -> Any:
    return row[name] if isinstance(row, dict) else getattr(row, name)
