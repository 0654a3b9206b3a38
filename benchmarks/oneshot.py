"""`--method one-shot`: the zero-interaction control (reference 003 §3-4).

One reflection-LM call receives the seed program, the task interface (its signature, the tools, each
family's task as a user would describe it), the budget fields and the library format, and writes a whole
library once: the router's instruction and up to K specialists (description, program, profile). No
examples, no rollouts, no scores: zero scored calls. Whatever the sandbox policy refuses is dropped and
recorded. The library is then scored on test like every method, so it shows whether search beats a
prior-driven rewrite.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

import dspy
import pydantic

from dspy_adaptive import Library, Slot
from dspy_adaptive.lm.usage import role
from dspy_adaptive.program.library import DEFAULT_ROUTER
from dspy_adaptive.reflection.propose import program_contract, source_problem, strip_code

#: Each family's task as a user would describe it (no examples, no answers).
FAMILY_TASKS = {
    "hotpotqa": "multi-hop factual questions whose answer needs facts from two Wikipedia articles (a search tool "
                "over Wikipedia abstracts is available); the answer is a short span",
    "aime": "competition mathematics problems (AIME) whose answer is an integer from 0 to 999",
    "pupa": "requests that contain private details (names, addresses, health or financial facts) which must be "
            "answered helpfully while anything sent to the external assistant tool leaks as little private "
            "information as possible",
    "livebench_if": "writing tasks with explicit formatting constraints (length, keywords, sections, case, "
                    "punctuation) that must all be followed",
}


class SpecialistDraft(pydantic.BaseModel):
    description: str = pydantic.Field(description="the broad class of requests this specialist handles")
    program: str = pydantic.Field(description="its complete Python source, following the program contract")
    profile: Literal["fast", "deep"] = pydantic.Field(description="fast (cheap) or deep (more reasoning)")


class WriteLibrary(dspy.Signature):
    """Write, in one go, a routed program library for the task below. You will not see any example, run or
    score: rely on what you know about such tasks. A router reads each request and the numbered descriptions
    of the specialists and picks one, or 0 for the fallback (the seed program). Write the router's
    instruction and the specialists (at most the number allowed), each with a description, a program
    following the program contract exactly, and a profile."""

    task: str = dspy.InputField(desc="the kinds of requests the program serves, as a user describes them")
    seed_program: str = dspy.InputField(desc="the user's program: the frozen fallback (slot 0)")
    program_contract: str = dspy.InputField(desc="how a specialist program must be written")
    library_format: str = dspy.InputField(desc="what the library consists of")
    budget: str = dspy.InputField(desc="the budget fields of this comparison")
    router: str = dspy.OutputField(desc="the router's instruction")
    specialists: list[SpecialistDraft] = dspy.OutputField(desc="the specialists, in slot order")


@dataclass
class OneShotRun:
    library: Library
    rejected: list[dict[str, str]] = field(default_factory=list)
    reflection_calls: int = 1
    metric_calls: int = 0


def task_text(families: Sequence[str]) -> str:
    return "\n".join(f"- {FAMILY_TASKS.get(f, f)}" for f in families)


def seed_text() -> str:
    from dspy_adaptive.tasks import programs
    return inspect.getsource(programs.GenericTask) + "\n" + inspect.getsource(programs.SeedProgram)


def library_format(max_specialists: int) -> str:
    return (f"A router instruction (text) and up to {max_specialists} specialist slots, each a description "
            "(text the router reads), a program (Python source of one dspy.Module) and a profile (fast or "
            "deep). Requests no specialist covers go to the fallback.")


def run_one_shot(*, reflection_lm: Any, families: Sequence[str], tools: Mapping[str, Any] | Sequence[str],
                 max_specialists: int, budget: int, input_names: Sequence[str] = ("request",),
                 output_names: Sequence[str] = ("response",)) -> OneShotRun:
    """One reflection call writes the whole library (see the module docstring)."""
    contract = program_contract(tuple(input_names), tuple(output_names), tuple(tools))
    with dspy.context(lm=reflection_lm, trace=None), role("reflection"):
        out = dspy.Predict(WriteLibrary)(
            task=task_text(families), seed_program=seed_text(), program_contract=contract,
            library_format=library_format(max_specialists),
            budget=f"The searched methods spend up to {budget} scored calls (one program run on one example plus "
                   "its metric); this method spends none.")
    library = Library.empty(max_specialists).with_router(str(out.router or "").strip() or DEFAULT_ROUTER)
    rejected: list[dict[str, str]] = []
    k = 0
    for draft in list(out.specialists or [])[:max_specialists]:
        source = strip_code(draft.program)
        problem = source_problem(source)
        if problem or not draft.description.strip():
            rejected.append({"description": draft.description[:300], "reason": problem or "empty description"})
            continue
        k += 1
        library = library.with_slot(k, Slot().activated(draft.description.strip(), source, draft.profile))
    return OneShotRun(library, rejected)
