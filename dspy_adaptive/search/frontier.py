"""Pareto frontiers over the archive, as gepa keeps them (`frontier_type`), for parent selection and merges.

gepa tracks four frontiers (`gepa.core.state.FrontierType`), chosen with `gepa_kwargs={"frontier_type": ...}`:

    instance   per validation row: the candidates with the best score on it (the default; the paper's)
    objective  per objective of the metric's `objective_scores`: the candidates with the best mean of it
    hybrid     both: keys ("val_id", row) and ("objective", name)
    cartesian  per (row, objective): keys ("cartesian", row, name)

A frontier maps each key to the set of candidates at its best value; gepa's selection samples a candidate
with a frequency proportional to the number of keys it is best on (dominated candidates removed). An
objective's mean over a candidate's rows counts the rows that report it, as gepa's
`GEPAState._aggregate_objective_scores`. Computed here from the archive (each candidate's per-row scores and
objective scores) rather than updated incrementally, with the same result: a key's best set is every
candidate attaining its maximum. Pure functions.
"""

from __future__ import annotations

import typing
from typing import Hashable, Iterable, Mapping, Sequence

from gepa.core.state import FrontierType

from dspy_adaptive.data import InputError

FRONTIER_TYPES: tuple[str, ...] = typing.get_args(FrontierType)   # ("instance", "objective", "hybrid", "cartesian")
NEEDS_OBJECTIVES = tuple(t for t in FRONTIER_TYPES if t != "instance")

RowScores = Mapping[str, float]                     # validation row id -> score
RowObjectives = Mapping[str, Mapping[str, float]]   # validation row id -> {objective: score}


class MissingObjectivesError(InputError):
    """A frontier over objectives, but the metric returned no `objective_scores`."""


def best_sets(values: Iterable[tuple[int, Hashable, float]]) -> dict[Hashable, set[int]]:
    """{key: the candidates attaining the key's largest value} from (candidate, key, value) triples."""
    best: dict[Hashable, float] = {}
    fronts: dict[Hashable, set[int]] = {}
    for cand, key, value in values:
        prev = best.get(key, float("-inf"))
        if value > prev:
            best[key], fronts[key] = value, {cand}
        elif value == prev:
            fronts[key].add(cand)
    return fronts


def aggregate_objectives(per_row: Iterable[Mapping[str, float] | None]) -> dict[str, float]:
    """The mean of each objective over the rows that report it (gepa's `_aggregate_objective_scores`)."""
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for objectives in per_row:
        for name, score in (objectives or {}).items():
            totals[name] = totals.get(name, 0.0) + score
            counts[name] = counts.get(name, 0) + 1
    return {name: totals[name] / counts[name] for name in totals}


def frontier(frontier_type: str, scores: Sequence[RowScores], objectives: Sequence[RowObjectives],
             row_ids: Sequence[str]) -> dict[Hashable, set[int]]:
    """The frontier of `frontier_type` over candidates 0..n-1 (`scores[i]` and `objectives[i]` are candidate
    i's per-row scores and objective scores), keyed as gepa keys it (see the module docstring)."""
    if frontier_type not in FRONTIER_TYPES:
        raise ValueError(f"frontier_type must be one of {', '.join(FRONTIER_TYPES)}, got {frontier_type!r}")
    instance = best_sets((c, rid, s[rid]) for c, s in enumerate(scores) for rid in row_ids if rid in s)
    if frontier_type == "instance":
        return instance
    means = [aggregate_objectives(o.get(rid) for rid in row_ids) for o in objectives]
    by_objective = best_sets((c, name, v) for c, agg in enumerate(means) for name, v in agg.items())
    if frontier_type == "objective":
        return by_objective
    if frontier_type == "hybrid":
        return {**{("val_id", rid): front for rid, front in instance.items()},
                **{("objective", name): front for name, front in by_objective.items()}}
    return best_sets((c, ("cartesian", rid, name), v) for c, o in enumerate(objectives) for rid in row_ids
                     for name, v in (o.get(rid) or {}).items())


def require_objectives(frontier_type: str, objectives: RowObjectives) -> None:
    """gepa's check, on the seed's validation: a frontier over objectives needs a metric that returns them."""
    if frontier_type in NEEDS_OBJECTIVES and not any(objectives.values()):
        raise MissingObjectivesError(
            f"frontier_type={frontier_type!r} needs objective scores, but the metric returned none on the seed's "
            "validation: return dspy.Prediction(score=..., objective_scores={name: number, ...}) from the metric, "
            "or use frontier_type='instance' (the default)")


__all__ = ["FRONTIER_TYPES", "MissingObjectivesError", "NEEDS_OBJECTIVES", "aggregate_objectives", "best_sets",
           "frontier", "require_objectives"]
