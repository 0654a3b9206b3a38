"""Reflect step: turn a parent's minibatch records into one proposal (data), via two LM calls.

A malformed answer, an impossible target, or source the sandbox rejects is a *rejected proposal*
with its reason — never an exception — and the reason is shown to the next reflection on that parent.
Every rejection also carries a typed `failure` (records.FailureKind), which is what reports count.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import dspy

from dspy_adaptive.data import Row
from dspy_adaptive.library import Library
from dspy_adaptive.profiles import declared_profile
from dspy_adaptive.records import ACTIONS, FailureKind, ProposalRecord, RowResult
from dspy_adaptive.reflection import signatures as sig
from dspy_adaptive.reflection.boundaries import for_program_rewrite
from dspy_adaptive.reflection.traces import defang, render_history, render_slots, render_traces, render_usage
from dspy_adaptive.routed_program import parse_slot_answer
from dspy_adaptive.sandbox import compile_program
from dspy_adaptive.sandbox.allowlist import prompt_text
from dspy_adaptive.usage import role

ALLOWED = prompt_text()   # the sandbox policy's own allow-list and grammar, so the prompt cannot drift from them


@dataclass(frozen=True)
class Edit:
    """The outcome of reflection: a child library, or a rejection reason."""

    action: str | None
    slot: int | None
    child: Library | None
    reason: str | None = None  # set when rejected
    rejected_source: str | None = None  # the source the sandbox refused, kept for the run record
    failure: FailureKind | None = None  # set when rejected: what kind of rejection this is

    @property
    def rejected(self) -> bool:
        return self.child is None


def program_contract(input_names: Sequence[str], output_names: Sequence[str], tools: Sequence[str]) -> str:
    args = ", ".join(input_names)
    outs = ", ".join(f"{o}=..." for o in output_names)
    sig = f"{', '.join(input_names)} -> {', '.join(output_names)}"
    call = ", ".join(f"{i}={i}" for i in input_names)
    ret = ", ".join(f"{o}=out.{o}" for o in output_names)
    tool_text = ("Tools callable as plain functions: " + ", ".join(f"{t}(...)" for t in tools) + ".") if tools \
        else "No tools are available."
    return (
        "Write exactly one class that subclasses dspy.Module (dspy is already available; no other import needed).\n"
        "- __init__(self) calls super().__init__() and creates predictors, e.g.\n"
        "  self.solve = dspy.ChainOfThought(\"question -> answer\") or\n"
        "  self.check = dspy.Predict(\"question, draft -> verdict\", instructions=\"...\").\n"
        f"- forward(self, {args}) may call predictors (keyword arguments) and plain Python, and must return "
        f"dspy.Prediction({outs}).\n"
        f"- {ALLOWED} No files, processes, network, eval/exec, getattr tricks or names starting with an "
        "underscore: the sandbox rejects them.\n"
        f"- {tool_text}\n"
        "- Optionally choose the LM profile the predictors run on with one module-level line, "
        "PROFILE = \"fast\" (no extended thinking, cheaper) or PROFILE = \"deep\" (thinking on, more tokens).\n"
        "A complete, valid example to adapt:\n"
        "class Specialist(dspy.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        f"        self.solve = dspy.ChainOfThought(\"{sig}\", instructions=\"Solve the request step by step.\")\n\n"
        f"    def forward(self, {args}):\n"
        f"        out = self.solve({call})\n"
        f"        return dspy.Prediction({ret})\n"
        "Return only the Python source."
    )


def strip_code(text: str) -> str:
    """The source inside the first ```python (or ```py, or bare ```) fence that is closed, or the text itself.

    The same answer as `re.search(r"```(?:python|py)?\\s*\\n(.*?)```", text, re.S)`, in one pass: that
    expression backtracks over its `\\s*` for every closing-fence search and takes quadratic time on a
    fence followed by many blank lines (LM output is not trusted to be well-formed)."""
    text = text or ""
    pos = 0
    while (p := text.find("```", pos)) >= 0:
        pos = p + 1
        for lang in ("python", "py", ""):
            if not text.startswith(lang, p + 3):
                continue
            start = p + 3 + len(lang)
            end = start
            while end < len(text) and text[end].isspace():
                end += 1
            newline = text.rfind("\n", start, end)        # \s*\n: the last newline of the whitespace run
            if newline < 0:
                continue
            close = text.find("```", newline + 1)
            return (text[newline + 1:close] if close >= 0 else text).strip() + "\n"
    return text.strip() + "\n"


def _rejected(action: str | None, slot: int | None, failure: FailureKind, reason: str,
              source: str | None = None) -> Edit:
    return Edit(action, slot, None, reason, rejected_source=source, failure=failure)


def _check_source(action: str, slot: int | None, source: str) -> Edit | None:
    res = compile_program(source)
    reasons = list(res.reasons)
    problem = declared_profile(source)[1]
    if problem:
        reasons.append(problem)
    if res.ok and not problem:
        return None
    return _rejected(action, slot, "sandbox_rejected",
                     "the new program was rejected by the sandbox: " + "; ".join(reasons), source)


class Reflector:
    """Runs SelectAction then the chosen edit on the reflection LM."""

    def __init__(self, reflection_lm: Any, *, input_names: Sequence[str], output_names: Sequence[str],
                 tools: Sequence[str] = ()):
        self.lm = reflection_lm
        self.input_names, self.tools = tuple(input_names), tuple(tools)
        self.schedule = None  # a search.schedule.Schedule, when the caller wants the step record
        self.set_output_names(output_names)
        self.select = dspy.Predict(sig.SelectAction)
        self.activate = dspy.Predict(sig.ActivateSlot)
        self.rewrite_program = dspy.Predict(sig.RewriteProgram)
        self.rewrite_description = dspy.Predict(sig.RewriteDescription)
        self.rewrite_router = dspy.Predict(sig.RewriteRouter)
        self._local = threading.local()   # the current proposal's images (concurrent proposals: one per thread)

    def set_output_names(self, output_names: Sequence[str]) -> None:
        """The fallback's output fields, which every specialist must also return."""
        self.output_names = tuple(output_names)
        self.contract = program_contract(self.input_names, self.output_names or ("answer",), self.tools)

    def _call(self, predictor: dspy.Predict, **kwargs: Any) -> dspy.Prediction:
        """One reflection LM call; every text input has DSPy's field markers made inert (router text,
        descriptions and sources are LM-written; the traces are rendered quoted already)."""
        kwargs = {k: defang(v) if isinstance(v, str) else v for k, v in kwargs.items()}
        t0 = time.perf_counter()
        images = getattr(self._local, "images", None)
        if images:   # the requests' images (dspy.Type inputs) go to the reflection LM as structured content
            predictor = dspy.Predict(predictor.signature.append(
                "images", dspy.InputField(desc="the images (and other media) the traces refer to as [image k]"),
                type_=list[dspy.Type]))
            kwargs["images"] = list(images)
        try:
            with dspy.context(lm=self.lm, trace=None), role("reflection"):
                return predictor(**kwargs)
        finally:
            if self.schedule is not None:
                self.schedule.record("reflection", 1, 1, t0, time.perf_counter())

    def propose(self, parent: Library, rows: Sequence[Row], results: Sequence[RowResult],
                history: Sequence[ProposalRecord] = ()) -> Edit:
        """One proposal for `parent` from its minibatch `results` on `rows`; `history` is the recent
        proposals on its lineage (shown to action selection)."""
        images: list = []
        traces = render_traces(rows, results, images)
        self._local.images = images
        try:
            choice = self._call(self.select, router=parent.router, specialists=render_slots(parent),
                                usage=render_usage(parent, results), history=render_history(history) or "none",
                                traces=traces)
        except Exception as e:
            return _rejected(None, None, "selection_failed",
                             f"action selection failed: {type(e).__name__}: {str(e)[:300]}")
        action = str(choice.action or "").strip().lower().replace(" ", "_").replace("-", "_")
        slot = parse_slot_answer(choice.slot)
        if action not in ACTIONS:   # recorded without an action: only ACTIONS are valid action names
            return _rejected(None, slot, "unknown_action",
                             f"unknown action {action!r} (expected one of {', '.join(ACTIONS)})")
        if action == "activate" and parent.inactive_ids() and slot not in parent.inactive_ids():
            slot = parent.inactive_ids()[0]  # any free slot serves an activation: take the lowest
        problem = self._validate_target(parent, action, slot)
        if problem:
            return _rejected(action, slot, "invalid_target", problem)
        if action == "rewrite_program":   # Table 6: no sibling descriptions, not even inside the router's trace
            traces = render_traces(rows, for_program_rewrite(results))
        try:
            return self._edit(parent, action, slot, traces)
        except Exception as e:
            return _rejected(action, slot, "edit_failed", f"{action} failed: {type(e).__name__}: {str(e)[:300]}")

    @staticmethod
    def _validate_target(parent: Library, action: str, slot: int | None) -> str | None:
        if action == "rewrite_router":
            return None if parent.active_ids() else "rewrite_router needs at least one active specialist"
        if slot is None or not 1 <= slot <= parent.max_specialists:
            return f"{action} needs a slot number in 1..{parent.max_specialists}, got {slot!r}"
        if action == "activate" and parent.slot(slot).active:
            return f"activate targets slot {slot}, which is already active"
        if action != "activate" and not parent.slot(slot).active:
            return f"{action} targets slot {slot}, which is not active"
        return None

    def _edit(self, parent: Library, action: str, slot: int | None, traces: str) -> Edit:
        if action == "deactivate":  # quarantine: no LM call, program text kept
            return Edit(action, slot, parent.with_slot(slot, parent.slot(slot).deactivated()))
        if action == "rewrite_router":
            out = self._call(self.rewrite_router, traces=traces, router=parent.router,
                             specialists=render_slots(parent))
            text = str(out.new_router or "").strip()
            if not text:
                return _rejected(action, None, "bad_output", "rewrite_router returned an empty instruction")
            return self._changed(parent, action, None, parent.with_router(text))
        target = parent.slot(slot)
        if action == "activate":
            out = self._call(self.activate, traces=traces, router=parent.router, specialists=render_slots(parent),
                             target_slot=str(slot), program_contract=self.contract)
            source = strip_code(out.program)
            profile = str(out.profile or "").strip().strip('"').lower()
            description = str(out.description or "").strip()
            if profile not in ("fast", "deep"):
                return _rejected(action, slot, "bad_output",
                                 f"activate returned profile {out.profile!r}; expected fast or deep")
            if not description or description.upper() == "INACTIVE":
                return _rejected(action, slot, "bad_output", "activate returned no description")
            rejected = _check_source(action, slot, source)
            if rejected:
                return rejected
            return Edit(action, slot, parent.with_slot(slot, target.activated(description, source, profile)))
        if action == "rewrite_program":
            out = self._call(self.rewrite_program, traces=traces, description=target.description,
                             program=target.program_source, program_contract=self.contract)
            source = strip_code(out.new_program)
            rejected = _check_source(action, slot, source)
            if rejected:
                return rejected
            return self._changed(parent, action, slot, parent.with_slot(slot, target.with_program(source)))
        # rewrite_description
        out = self._call(self.rewrite_description, traces=traces, specialists=render_slots(parent),
                         target_slot=str(slot), program=target.program_source)
        text = str(out.new_description or "").strip()
        if not text or text.upper() == "INACTIVE":
            return _rejected(action, slot, "bad_output", "rewrite_description returned an empty description")
        return self._changed(parent, action, slot, parent.with_slot(slot, target.with_description(text)))

    @staticmethod
    def _changed(parent: Library, action: str, slot: int | None, child: Library) -> Edit:
        if child.content_hash == parent.content_hash:
            return _rejected(action, slot, "no_change", f"{action} changed nothing")
        return Edit(action, slot, child)
