"""What the search loop itself reads, validated next to the choices it checks against.

The budget's size and stop rule live in `Budget`, the metric's failure score in the `Evaluator`, merges in
`merge.settings.MergeSettings`, reflection in `reflection.settings.ReflectionSettings`, where rows run in
`search.execution.ExecutionSettings`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dspy_adaptive import checks
from dspy_adaptive.data import InputError
from dspy_adaptive.search.frontier import FRONTIER_TYPES
from dspy_adaptive.search.select import SELECTORS

#: k > 1: "start" folds proposals in the order they started (a seeded run is reproducible at any k);
#: "completion" folds them as they complete (a little more throughput; depends on thread timing).
FOLD_ORDERS = ("start", "completion")


@dataclass(frozen=True)
class SearchSettings:
    """How one search iteration runs: its minibatch, when reflection is skipped, how a parent is chosen and
    how many proposals are in flight at once.

    Args:
        minibatch_size (reflection_minibatch_size): feedback rows per reflective proposal.
        skip_perfect_score, perfect_score: skip reflection when the parent scores `perfect_score` on the whole
            minibatch.
        seed: seed of the search's random choices (selection, minibatches, merges).
        history_size: recent proposals of the parent's lineage that action selection reads.
        max_concurrent_proposals: k, reflective proposals in flight at once, sharing the evaluation threads;
            1 is exactly the sequential loop.
        fold_order: with k > 1, "start" (default): proposals fold into the archive in the order they started and
            every decision is taken at a point fixed by the seed, so a seeded run with an LM whose answers depend
            only on the prompt ends the same at any k (with reuse_scores=False); "completion": they fold as they
            complete and a stale parent stops a proposal at its next step (a little more throughput, but the run
            then depends on thread timing).
        candidate_selection (candidate_selection_strategy): "pareto", "current_best", "epsilon_greedy" or
            "top_k_pareto".
        frontier_type (gepa_kwargs["frontier_type"]): the Pareto frontier "pareto" and "top_k_pareto" selection
            and merges read, as gepa keeps it: "instance" (per validation row; the default), or, for a metric
            returning `objective_scores`, "objective" (per objective), "hybrid" (both) or "cartesian" (per row
            and objective); see `search.frontier`.
    """

    minibatch_size: int = 3
    skip_perfect_score: bool = True
    perfect_score: float = 1.0
    seed: int = 0
    history_size: int = 8
    max_concurrent_proposals: int = 1
    fold_order: str = "start"
    candidate_selection: str = "pareto"
    frontier_type: str = "instance"

    def __post_init__(self) -> None:
        checks.integer("reflection_minibatch_size", self.minibatch_size)
        checks.integer("max_concurrent_proposals", self.max_concurrent_proposals)
        checks.integer("history_size", self.history_size, minimum=0)
        checks.one_of("fold_order", self.fold_order, FOLD_ORDERS)
        checks.one_of("gepa_kwargs['frontier_type']", self.frontier_type, FRONTIER_TYPES)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise InputError(f"seed must be an integer or None, got {self.seed!r}")
        if self.candidate_selection not in SELECTORS:
            raise InputError(f"candidate_selection_strategy must be one of {sorted(SELECTORS)}, got "
                             f"{self.candidate_selection!r} (a gepa CandidateSelector object reads gepa's engine "
                             "state, which Adaptive-GEPA does not have)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
