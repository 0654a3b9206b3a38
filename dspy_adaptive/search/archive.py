"""Archive step: every fully validated candidate, its per-row scores, routes and lineage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

from dspy_adaptive.program.library import Library
from dspy_adaptive.schema import RowResult, ancestors
from dspy_adaptive.search.frontier import frontier


@dataclass(frozen=True)
class Candidate:
    """One archived library with what its full validation measured."""

    index: int
    library: Library
    parents: tuple[int, ...]
    origin: str                      # "seed", an action name, or "merge"
    scores: dict[str, float]         # validation row id -> score
    executed: dict[str, int | None]  # validation row id -> slot that ran (0 = fallback; None unknown)
    selected: dict[str, int | None]  # validation row id -> router selection
    discovered_at: int               # budget spent when it entered the archive
    iteration: int
    objective_scores: dict[str, dict[str, float]] = field(default_factory=dict)   # row id -> the metric's
    #                                                    objective_scores on it (rows without any left out)

    @property
    def val_mean(self) -> float:
        return sum(self.scores.values()) / len(self.scores) if self.scores else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "library": self.library.to_dict(), "parents": list(self.parents),
                "origin": self.origin, "scores": self.scores, "executed": self.executed,
                "selected": self.selected, "discovered_at": self.discovered_at, "iteration": self.iteration,
                "val_mean": self.val_mean, "hash": self.library.content_hash,
                **({"objective_scores": self.objective_scores} if self.objective_scores else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Candidate":
        return cls(index=d["index"], library=Library.from_dict(d["library"]), parents=tuple(d["parents"]),
                   origin=d["origin"], scores=dict(d["scores"]), executed=dict(d["executed"]),
                   selected=dict(d["selected"]), discovered_at=d["discovered_at"], iteration=d["iteration"],
                   objective_scores={k: dict(v) for k, v in (d.get("objective_scores") or {}).items()})


@dataclass
class Archive:
    """Append-only list of candidates; index = position. `frontier_type` is gepa's: which Pareto frontier
    parent selection and merges read (`search.frontier`)."""

    row_ids: tuple[str, ...]
    candidates: list[Candidate] = field(default_factory=list)
    frontier_type: str = "instance"

    def __len__(self) -> int:
        return len(self.candidates)

    def __getitem__(self, i: int) -> Candidate:
        return self.candidates[i]

    def add(self, library: Library, parents: Sequence[int], origin: str, results: Sequence[RowResult],
            discovered_at: int, iteration: int) -> Candidate:
        cand = Candidate(
            index=len(self.candidates), library=library, parents=tuple(parents), origin=origin,
            scores={r.row_id: r.score for r in results}, executed={r.row_id: r.executed for r in results},
            selected={r.row_id: r.selected for r in results}, discovered_at=discovered_at, iteration=iteration,
            objective_scores={r.row_id: dict(r.objective_scores) for r in results if r.objective_scores})
        self.candidates.append(cand)
        return cand

    def best_index(self) -> int:
        """Highest validation mean; ties -> the earliest candidate."""
        means = [c.val_mean for c in self.candidates]
        return means.index(max(means))

    def pareto_fronts(self) -> dict[str, set[int]]:
        """Per validation row, the candidates attaining the best score on it (GEPA's per-instance frontier)."""
        fronts: dict[str, set[int]] = {}
        for rid in self.row_ids:
            best = max(c.scores[rid] for c in self.candidates)
            fronts[rid] = {c.index for c in self.candidates if c.scores[rid] == best}
        return fronts

    def frontier(self) -> dict[Hashable, set[int]]:
        """The frontier parent selection and merges read: `frontier_type`'s (the per-row one by default)."""
        if self.frontier_type == "instance":
            return self.pareto_fronts()
        return frontier(self.frontier_type, [c.scores for c in self.candidates],
                        [c.objective_scores for c in self.candidates], self.row_ids)

    def as_of(self, iteration: int) -> "Archive":
        """The archive as the iterations before `iteration` left it: later candidates keep their place (indices
        are positions) but are masked -- scored -inf on every row, so they are on no front and never the best."""
        masked = [c if c.iteration < iteration else
                  Candidate(index=c.index, library=c.library, parents=c.parents, origin=c.origin,
                            scores=dict.fromkeys(c.scores, float("-inf")), executed={}, selected={},
                            discovered_at=c.discovered_at, iteration=c.iteration,
                            objective_scores={r: dict.fromkeys(o, float("-inf"))
                                              for r, o in c.objective_scores.items()})
                  for c in self.candidates]
        return Archive(self.row_ids, masked, self.frontier_type)

    def archived_since(self, size: int, iteration: int) -> int:
        """How many candidates the iterations before `iteration` archived after the archive held `size`."""
        return sum(1 for c in self.candidates[size:] if c.iteration < iteration)

    def ancestors(self, i: int) -> frozenset[int]:
        return ancestors([c.parents for c in self.candidates], i)

    def to_list(self) -> list[dict[str, Any]]:
        return [c.to_dict() for c in self.candidates]
