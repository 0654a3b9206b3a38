"""The OEO contract: what the optimizer LM may do, enforced here, not in its prompt (reference 003 §2-3).

`Contract` owns the run's state -- committed checkpoints (libraries), the evidence gathered, the budget and
the selected output -- and exposes the six actions of the tool interface as methods. Every action is
validated against the interface and the remaining budget before anything runs; a violation raises
`ContractViolation` (the runner records it as an operational failure and does not repair it). No action
reaches test data (the contract never holds it), validation labels (an evaluation returns scores only) or
anything outside the run (programs pass the sandbox policy and run in the sandbox).

Budget kinds are AdaptiveGEPA's: the first evaluation of the seed checkpoint is `seed_validation`, other
checkpoint evaluations `validation`, runs on training rows `parent_minibatch` (feedback scores), each row one
scored call through the same Evaluator.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from dspy_adaptive.data import Row
from dspy_adaptive.program.library import Library
from dspy_adaptive.reflection.propose import source_problem, strip_code
from dspy_adaptive.reflection.traces import render_slots, render_traces
from dspy_adaptive.schema import clip
from dspy_adaptive.search.evaluate import Evaluator

MAX_ROWS_PER_RUN = 16          # training rows one run_train action may ask for


class ContractViolation(ValueError):
    """An action the contract refuses; the message says why (recorded, never repaired)."""


@dataclass(frozen=True)
class Checkpoint:
    """A committed library: the seed (#0) or the result of a revision."""

    index: int
    library: Library
    parent: int | None
    val_scores: tuple[float, ...] | None = None      # set once evaluated on validation

    @property
    def val_mean(self) -> float | None:
        return None if not self.val_scores else sum(self.val_scores) / len(self.val_scores)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "library": self.library.to_dict(), "parent": self.parent,
                "val_scores": list(self.val_scores) if self.val_scores is not None else None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Checkpoint":
        scores = d.get("val_scores")
        return cls(int(d["index"]), Library.from_dict(d["library"]), d.get("parent"),
                   tuple(scores) if scores is not None else None)


@dataclass
class Evidence:
    """What the optimizer has seen: training runs (checkpoint, row id, score) in order."""

    runs: list[tuple[int, str, float]] = field(default_factory=list)

    def summary(self, limit: int = 40) -> str:
        if not self.runs:
            return "no training rows run yet"
        return "; ".join(f"#{c} {rid}: {s:.2f}" for c, rid, s in self.runs[-limit:])


class Contract:
    """The run's state and the six actions (see the module docstring)."""

    ACTIONS = ("inspect", "run_train", "evaluate", "revise", "select", "stop")

    def __init__(self, seed_library: Library, train: Sequence[Row], val: Sequence[Row], evaluator: Evaluator,
                 *, seed: int = 0):
        self.train, self.val, self.evaluator = list(train), list(val), evaluator
        self.budget = evaluator.budget
        self.checkpoints: list[Checkpoint] = [Checkpoint(0, seed_library, None)]
        self.evidence = Evidence()
        self.selected: int | None = None
        self.stopped = False
        self.rng = random.Random(seed)
        self.turn = 0                 # the turn acting now: its scored calls are logged under it
        self._train_ids = {r.id: r for r in self.train}

    def begin_turn(self, index: int) -> None:
        """Turn `index` acts next (a resumed run redoing a cut-off turn replays its logged calls)."""
        self.turn = index

    # -- helpers ----------------------------------------------------------------------------------------
    @property
    def remaining(self) -> int:
        return max(0, self.budget.max_calls - self.budget.spent)

    def _checkpoint(self, index: Any) -> Checkpoint:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.checkpoints):
            raise ContractViolation(f"checkpoint {index!r} does not exist (0..{len(self.checkpoints) - 1})")
        return self.checkpoints[index]

    def _afford(self, calls: int) -> None:
        if calls > self.remaining:
            raise ContractViolation(f"over budget: this action costs {calls} scored calls and {self.remaining} "
                                    "remain")

    # -- the actions --------------------------------------------------------------------------------------
    def inspect(self) -> str:
        """The current (latest) library, every checkpoint with its validation mean, the evidence, the budget."""
        current = self.checkpoints[-1]
        lines = [f"Remaining budget: {self.remaining} of {self.budget.max_calls} scored calls "
                 f"({len(self.train)} training rows, {len(self.val)} validation rows; one row = one call).",
                 "Checkpoints: " + ", ".join(
                     f"#{c.index}" + (f" val {c.val_mean:.3f}" if c.val_mean is not None else " (not evaluated)")
                     for c in self.checkpoints),
                 f"Selected output: {'#' + str(self.selected) if self.selected is not None else 'none yet'}",
                 f"Evidence: {self.evidence.summary()}",
                 f"Training row ids: {', '.join(r.id for r in self.train[:60])}",
                 f"Current library (checkpoint #{current.index}):", f"Router: {current.library.router}",
                 render_slots(current.library)]
        for k in current.library.active_ids():
            slot = current.library.slot(k)
            lines.append(f"Slot {k} program ({slot.profile}):\n{slot.program_source}")
        return "\n".join(lines)

    def run_train(self, checkpoint: Any = None, row_ids: Any = None, sample: Any = None) -> str:
        """Run a checkpoint on named training rows or a random sample; returns traces and feedback."""
        cp = self._checkpoint(len(self.checkpoints) - 1 if checkpoint is None else checkpoint)
        if row_ids is not None:
            if not isinstance(row_ids, list) or not all(isinstance(r, str) for r in row_ids):
                raise ContractViolation("row_ids must be a list of training row ids")
            unknown = [r for r in row_ids if r not in self._train_ids]
            if unknown:
                raise ContractViolation(f"not training rows: {unknown[:5]} (validation and test rows cannot be run)")
            rows = [self._train_ids[r] for r in dict.fromkeys(row_ids)]
        else:
            n = sample if sample is not None else min(4, len(self.train))
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ContractViolation(f"sample must be a positive integer, got {n!r}")
            rows = self.rng.sample(self.train, min(n, len(self.train)))
        if not rows or len(rows) > MAX_ROWS_PER_RUN:
            raise ContractViolation(f"run_train takes 1 to {MAX_ROWS_PER_RUN} rows, got {len(rows)}")
        self._afford(len(rows))
        results = self.evaluator.evaluate(cp.library, rows, "parent_minibatch", tag=self.turn)
        self.evidence.runs += [(cp.index, r.row_id, r.score) for r in results]
        return render_traces(rows, results)

    def evaluate(self, checkpoint: Any = None) -> str:
        """Score a checkpoint on the whole validation set (scores only, never labels)."""
        cp = self._checkpoint(len(self.checkpoints) - 1 if checkpoint is None else checkpoint)
        self._afford(len(self.val))
        kind = "seed_validation" if cp.index == 0 and cp.val_scores is None else "validation"
        results = self.evaluator.evaluate(cp.library, self.val, kind, tag=self.turn)
        scores = tuple(r.score for r in results)
        self.checkpoints[cp.index] = Checkpoint(cp.index, cp.library, cp.parent, scores)
        mean = sum(scores) / len(scores) if scores else 0.0
        return f"checkpoint #{cp.index}: validation mean {mean:.4f} over {len(scores)} rows"

    def revise(self, router: Any = None, slots: Any = None, base: Any = None) -> str:
        """A new checkpoint from `base` (default: the latest) with the given changes, committed at once.
        `slots`: {slot number: {"description", "program", "profile", "active"}} (each key optional)."""
        cp = self._checkpoint(len(self.checkpoints) - 1 if base is None else base)
        lib = cp.library
        if router is not None:
            if not isinstance(router, str) or not router.strip():
                raise ContractViolation("router must be non-empty text")
            lib = lib.with_router(router.strip())
        for key, change in (slots or {}).items():
            lib = self._revise_slot(lib, key, change)
        if lib.content_hash == cp.library.content_hash:
            raise ContractViolation("the revision changes nothing")
        self.checkpoints.append(Checkpoint(len(self.checkpoints), lib, cp.index))
        return f"committed checkpoint #{len(self.checkpoints) - 1} (from #{cp.index})"

    @staticmethod
    def _revise_slot(lib: Library, key: Any, change: Any) -> Library:
        try:
            k = int(key)
        except (TypeError, ValueError):
            raise ContractViolation(f"slot {key!r} is not a slot number") from None
        if not 1 <= k <= lib.max_specialists:
            raise ContractViolation(f"slot {k} is out of range 1..{lib.max_specialists}")
        if not isinstance(change, Mapping) or set(change) - {"description", "program", "profile", "active"}:
            raise ContractViolation("a slot change is a mapping of description, program, profile and active")
        slot = lib.slot(k)
        if change.get("active") is False:
            return lib.with_slot(k, slot.deactivated())
        description = str(change.get("description", slot.description if slot.active else "")).strip()
        source = strip_code(str(change["program"])) if "program" in change else slot.program_source
        profile = str(change.get("profile", slot.profile or "fast"))
        if profile not in ("fast", "deep"):
            raise ContractViolation(f"profile must be fast or deep, got {profile!r}")
        if not description or description.upper() == "INACTIVE":
            raise ContractViolation(f"slot {k} needs a description")
        problem = source_problem(source) if source.strip() else "the slot has no program"
        if problem:
            raise ContractViolation(f"slot {k}: {problem}")
        if not slot.active:
            return lib.with_slot(k, slot.activated(description, source, profile))
        return lib.with_slot(k, replace(slot.with_description(description).with_program(source), profile=profile))

    def select(self, checkpoint: Any) -> str:
        cp = self._checkpoint(checkpoint)
        self.selected = cp.index
        return f"checkpoint #{cp.index} selected as the output"

    def stop(self) -> str:
        self.stopped = True
        return "stopped"

    # -- state ----------------------------------------------------------------------------------------------
    def output(self) -> Checkpoint:
        """The selected checkpoint, else the best evaluated one, else the seed."""
        if self.selected is not None:
            return self.checkpoints[self.selected]
        evaluated = [c for c in self.checkpoints if c.val_mean is not None]
        return max(evaluated, key=lambda c: (c.val_mean, -c.index)) if evaluated else self.checkpoints[0]

    def state_dict(self) -> dict[str, Any]:
        return {"checkpoints": [c.to_dict() for c in self.checkpoints],
                "evidence": [list(r) for r in self.evidence.runs], "selected": self.selected,
                "stopped": self.stopped, "budget": self.budget.report().by_kind,
                "rng": clip(repr(self.rng.getstate()), 10 ** 6)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        import ast
        self.checkpoints = [Checkpoint.from_dict(c) for c in state["checkpoints"]]
        self.evidence = Evidence([(int(c), str(r), float(s)) for c, r, s in state.get("evidence", [])])
        self.selected, self.stopped = state.get("selected"), bool(state.get("stopped"))
        self.budget.restore(state["budget"])
        self.rng.setstate(ast.literal_eval(state["rng"]))


__all__ = ["Checkpoint", "Contract", "ContractViolation", "Evidence"]
