"""Repair: a reflection answer rejected before the gate goes back to the reflection LM once more.

A weak or mid-sized reflection model often writes something close: source with one forbidden name, a
program that does not compile, an answer that does not parse, a slot number out of range, or an answer cut
off at its token limit. Rather than spend the whole iteration, the reflection LM gets the exact reason and
its own answer back and may answer again, up to `max_repair_attempts` times (default 1).

* Repairs are reflection calls, never scored calls: nothing is run or scored until an answer is usable.
* Every attempt is kept (`Attempt`): stage, attempt number, failure kind, reason and the (clipped) answer;
  the run record stores them in the proposal's details, so a report can say what was tried and why.
* An answer that hit the token limit (`finish_reason == "length"`) is never adopted, even when it happens to
  parse: a program cut off mid-way may still compile and do something else than intended.

What is repairable is a typed set (`REPAIRABLE`); an LM call that raised for another reason (network,
provider error) is not repaired here: retrying provider faults is the LM layer's job (`num_retries`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, TypeVar

import dspy

from dspy_adaptive.lm.finish import FinishWatch
from dspy_adaptive.schema import FailureKind, clip

#: Failures a repair call may fix: the answer itself was unusable.
REPAIRABLE: frozenset[str] = frozenset({"sandbox_rejected", "bad_output", "unparseable", "truncated",
                                        "unknown_action", "invalid_target"})

ANSWER_CHARS = 6000       # an answer kept in the record / sent back for repair

PREVIOUS_DESC = "your previous answer to this same request, which was rejected"
PROBLEM_DESC = ("exactly why your previous answer was rejected; answer the whole request again, in full, with "
                "this fixed")


class Rejection(Exception):
    """An unusable reflection answer: its failure kind, the reason (for people and for the repair call) and
    the answer itself."""

    def __init__(self, failure: FailureKind, reason: str, answer: str = "", *, source: str | None = None,
                 target: tuple[str | None, int | None] = (None, None)):
        super().__init__(reason)
        self.failure, self.reason, self.answer, self.source = failure, reason, answer, source
        self.target = target     # (action, slot) a rejected action selection asked for

    @property
    def repairable(self) -> bool:
        return self.failure in REPAIRABLE


@dataclass(frozen=True)
class Attempt:
    """One reflection answer and its fate: `attempt` 0 is the first answer, 1.. are repairs."""

    stage: str                  # "select" or the edit's action name
    attempt: int
    failure: str | None         # None: the answer was usable
    reason: str | None
    answer: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RepairNote:
    """What a repair call is told: its own previous answer and the exact reason it was rejected."""

    answer: str
    problem: str

    def fields(self) -> dict[str, str]:
        return {"previous_answer": clip(self.answer or "(empty)", ANSWER_CHARS), "problem": self.problem}


def with_repair_fields(predictor: dspy.Predict) -> dspy.Predict:
    """The same call with two more inputs: the previous answer and the problem to fix (both made inert to DSPy's
    field markers by the caller, like every reflection input)."""
    signature = predictor.signature.append("previous_answer", dspy.InputField(desc=PREVIOUS_DESC), type_=str)
    signature = signature.append("problem", dspy.InputField(desc=PROBLEM_DESC), type_=str)
    return dspy.Predict(signature)


T = TypeVar("T")


def with_repairs(stage: str, run: Callable[[RepairNote | None], T], max_repairs: int,
                 attempts: list[Attempt]) -> T:
    """`run(None)`, then while it raises a repairable `Rejection` and repairs are left, `run(note)` with the
    rejected answer and its reason. Appends every attempt to `attempts`; re-raises the last `Rejection`."""
    note: RepairNote | None = None
    for n in range(1 + max(0, int(max_repairs))):
        try:
            value = run(note)
        except Rejection as rej:
            attempts.append(Attempt(stage, n, rej.failure, clip(rej.reason, 1000), clip(rej.answer, ANSWER_CHARS)))
            if not rej.repairable or n >= max_repairs:
                raise
            note = RepairNote(rej.answer, rej.reason)
            continue
        attempts.append(Attempt(stage, n, None, None, ""))
        return value
    raise AssertionError("unreachable")  # pragma: no cover


def truncation(watch: FinishWatch, max_tokens: Any) -> Rejection | None:
    """A `Rejection` when the last LM answer of a call (the one its result came from) stopped at its token
    limit."""
    if not watch.calls or watch.calls[-1][0] != "length":
        return None
    limit = f" (max_tokens={max_tokens})" if max_tokens else ""
    return Rejection("truncated", f"the answer stopped at the token limit{limit}, so it is cut off and was not "
                     "used; write a shorter, complete answer", watch.calls[-1][1])
