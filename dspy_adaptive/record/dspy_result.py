"""`detailed_results`: dspy.GEPA's DspyGEPAResult, field for field, plus Adaptive-GEPA's run record.

`DetailedResults` is a `dspy.teleprompt.gepa.gepa.DspyGEPAResult` (isinstance holds) built from a finished
search, with the same shapes and indexing as dspy.GEPA's:

* `candidates`: every archived candidate as a program (a `RoutedProgram` over the candidate's library,
  sharing the returned program's fallback, LMs, tools and sandbox), in archive order;
* `parents`: `[None]` for the seed, else the parent indices;
* `val_aggregate_scores`, `discovery_eval_counts`, `total_metric_calls`, `num_full_val_evals`, `log_dir`,
  `seed`, `best_idx`, `best_candidate`, `highest_score_achieved_per_val_task`;
* `val_subscores[i]` and `per_val_instance_best_candidates` keyed by valset index (0..n-1), the fronts as
  sets;
* `best_outputs_valset` (with track_best_outputs): valset index -> [(candidate index, dspy.Prediction)];
* `val_aggregate_subscores`, `per_objective_best_candidates`, `objective_pareto_front` when the metric
  returns `objective_scores` (None otherwise), computed as gepa does.

Adaptive-GEPA's extras: `run` (the `AdaptiveGEPAResult` run record, also written as run.json), `libraries`
(each candidate's `Library`), `row_ids` (valset index -> row id), and every field of the run record read
through: `origins`, `proposals`, `action_counts`, `budget`, `usage` (the cost ledger), `executed`,
`selected`, `merge_events`, `stop_reason`, `schedule`, `faults`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import dspy
from dspy.teleprompt.gepa.gepa import DspyGEPAResult

from dspy_adaptive.data import Row
from dspy_adaptive.program.library import Library
from dspy_adaptive.schema import RowResult
from dspy_adaptive.search.frontier import aggregate_objectives, best_sets

if TYPE_CHECKING:  # pragma: no cover
    from dspy_adaptive.program.routed import RoutedProgram
    from dspy_adaptive.record.run_record import AdaptiveGEPAResult

_RUN_FIELDS = ("origins", "proposals", "action_counts", "budget", "usage", "executed", "selected", "merge_events",
               "stop_reason", "schedule", "faults", "sandbox", "merge_census", "reproducibility")


@dataclass(frozen=True)
class DetailedResults(DspyGEPAResult):
    run: Any = None                          # the AdaptiveGEPAResult run record
    row_ids: tuple[str, ...] = ()            # valset index -> row id

    @property
    def libraries(self) -> list[Library]:
        return list(self.run.candidates) if self.run is not None else []

    @property
    def best_library(self) -> Library:
        return self.libraries[self.best_idx]

    @property
    def cost_usd(self) -> float:
        """USD spent on LM calls in the whole search, every role."""
        return sum(float(v.get("cost", 0.0)) for v in (self.run.usage if self.run is not None else {}).values())

    def __getattr__(self, name: str) -> Any:
        if name in _RUN_FIELDS:
            run = self.__dict__.get("run")
            if run is not None:
                return getattr(run, name)
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    @staticmethod
    def _candidate_components(cand: Any) -> dict[str, str]:
        """A candidate's text components: the library's router, and each active slot's description and
        program (what Adaptive-GEPA evolves, as dspy.GEPA's are predictor instructions)."""
        library = getattr(cand, "library", None)
        if not isinstance(library, Library):
            return DspyGEPAResult._candidate_components(cand)
        out = {"router": library.router}
        for k in library.active_ids():
            slot = library.slot(k)
            out[f"slot{k}.description"] = slot.description
            out[f"slot{k}.program"] = slot.program_source
            out[f"slot{k}.profile"] = slot.profile
        return out

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["row_ids"] = list(self.row_ids)
        if self.best_outputs_valset is not None:
            d["best_outputs_valset"] = {i: [(c, dict(p)) for c, p in outs]
                                        for i, outs in self.best_outputs_valset.items()}
        if self.run is not None:
            d["run"] = self.run.to_dict()
        return d

    @classmethod
    def build(cls, run: "AdaptiveGEPAResult", program: "RoutedProgram", val: Sequence[Row],
              cache: Mapping[tuple[str, str], RowResult], *, track_best_outputs: bool = False) -> "DetailedResults":
        """The detailed results of a finished search.

        Args:
            run: the run record (`AdaptiveGEPAResult.from_state`).
            program: a RoutedProgram to build each candidate from (`program.with_library`).
            val: the validation rows, in valset order.
            cache: the search's scored calls by (library hash, row id), for outputs and objective scores.
            track_best_outputs: fill `best_outputs_valset`.
        """
        row_ids = tuple(r.id for r in val)
        index = {rid: i for i, rid in enumerate(row_ids)}
        libraries = list(run.candidates)
        candidates = [program.with_library(lib) for lib in libraries]
        val_subscores = [{index[rid]: float(s) for rid, s in scores.items() if rid in index}
                         for scores in run.val_subscores]
        fronts = {index[rid]: set(front) for rid, front in run.per_val_instance_best_candidates.items()
                  if rid in index}
        results = [{rid: cache.get((lib.content_hash, rid)) for rid in row_ids} for lib in libraries]

        best_outputs = None
        if track_best_outputs:
            best_outputs = {}
            for i, rid in enumerate(row_ids):
                outs = []
                for c in sorted(fronts.get(i, ())):
                    res = results[c].get(rid)
                    if res is not None:
                        outs.append((c, _prediction(res)))
                best_outputs[i] = outs

        objectives = [aggregate_objectives(res.objective_scores for res in r.values() if res is not None)
                      for r in results]
        has_objectives = any(objectives)
        per_objective_best = best_sets((c, name, v) for c, agg in enumerate(objectives) for name, v in agg.items())
        objective_front = {name: objectives[min(front)][name] for name, front in per_objective_best.items()}

        return cls(
            candidates=candidates,
            parents=[list(p) if p else [None] for p in run.parents],
            val_aggregate_scores=list(run.val_aggregate_scores),
            val_subscores=val_subscores,
            per_val_instance_best_candidates=fronts,
            discovery_eval_counts=list(run.discovery_eval_counts),
            best_outputs_valset=best_outputs,
            total_metric_calls=run.total_metric_calls,
            num_full_val_evals=run.num_full_val_evals,
            log_dir=run.log_dir,
            seed=run.seed,
            val_aggregate_subscores=objectives if has_objectives else None,
            per_objective_best_candidates=per_objective_best or None,
            objective_pareto_front=objective_front or None,
            run=run,
            row_ids=row_ids,
        )


def _prediction(res: RowResult) -> dspy.Prediction:
    pred = dspy.Prediction()
    for k, v in (res.output or {}).items():
        pred[k] = v
    return pred


__all__ = ["DetailedResults"]
