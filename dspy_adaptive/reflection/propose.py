"""Reflect step: turn a parent's minibatch records into one proposal (data), via two LM calls.

A malformed answer, an impossible target, or source the sandbox rejects is a *rejected proposal*
with its reason — never an exception — and the reason is shown to the next reflection on that parent.
Every rejection also carries a typed `failure` (records.FailureKind), which is what reports count.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import dspy
from dspy.utils.exceptions import AdapterParseError

from dspy_adaptive.data import Row
from dspy_adaptive.lm.usage import role
from dspy_adaptive.program.library import Library
from dspy_adaptive.program.profiles import declared_profile
from dspy_adaptive.program.routed import parse_slot_answer
from dspy_adaptive.reflection import budget, structured
from dspy_adaptive.reflection import signatures as sig
from dspy_adaptive.reflection.boundaries import for_program_rewrite
from dspy_adaptive.reflection.repair import (
    ANSWER_CHARS,
    REPAIRABLE,
    Attempt,
    FinishWatch,
    Rejection,
    RepairNote,
    truncation,
    with_repair_fields,
    with_repairs,
)
from dspy_adaptive.reflection.structured import PROPOSAL_FORMATS
from dspy_adaptive.reflection.traces import defang, render_history, render_slots, render_traces, render_usage
from dspy_adaptive.sandbox import compile_program
from dspy_adaptive.sandbox.allowlist import prompt_text
from dspy_adaptive.schema import ACTIONS, FailureKind, ProposalRecord, RowResult

ALLOWED = prompt_text()   # the sandbox policy's own allow-list and grammar, so the prompt cannot drift from them


def _signature_text(signature: type[dspy.Signature]) -> str:
    fields = signature.fields.values()
    return signature.instructions + "".join(str((f.json_schema_extra or {}).get("desc", "")) for f in fields)


#: The longest instructions + field descriptions of any reflection call (part of the prompt beside the traces).
SIGNATURE_TEXT = max((_signature_text(s) for s in (sig.SelectAction, sig.ActivateSlot, sig.RewriteProgram,
                                                   sig.RewriteDescription, sig.RewriteRouter)), key=len)
ADAPTER_TOKENS = 800      # the adapter's own framing of a call (field headers, format instructions)
#: What happens to an answer cut off at its token limit, or a program the sandbox refuses (Reflector).
UNUSABLE_PROGRAMS = ("reject", "gate")


@dataclass(frozen=True)
class Edit:
    """The outcome of reflection: a child library, or a rejection reason."""

    action: str | None
    slot: int | None
    child: Library | None
    reason: str | None = None  # set when rejected
    rejected_source: str | None = None  # the source the sandbox refused, kept for the run record
    failure: FailureKind | None = None  # set when rejected: what kind of rejection this is
    attempts: tuple[Attempt, ...] = ()  # every reflection answer of this proposal, repairs included
    format: str | None = None  # "code" or "structured" for a source-writing edit
    admitted: tuple[str, ...] = ()  # unusable_programs="gate": what was wrong with the adopted answer

    @property
    def rejected(self) -> bool:
        return self.child is None

    @property
    def repairs(self) -> int:
        return sum(1 for a in self.attempts if a.attempt > 0)

    def details(self) -> dict[str, Any]:
        """What the run record keeps of this edit beyond its outcome."""
        out: dict[str, Any] = {}
        if self.rejected_source:
            out["rejected_source"] = self.rejected_source[:6000]
        if self.format:
            out["format"] = self.format
        if self.attempts:
            out["attempts"] = [a.to_dict() for a in self.attempts]
            out["repairs"] = self.repairs
        if self.admitted:
            out["admitted"] = list(self.admitted)
        return out


def starter_program(input_names: Sequence[str], output_names: Sequence[str],
                    input_types: Mapping[str, str] | None = None) -> str:
    """A complete, valid specialist for the contract: one ChainOfThought over the request's inputs (a field
    holding one of DSPy's types declared with it, e.g. `clock_photo: dspy.Image`, so it reaches the LM as such)."""
    types = input_types or {}
    args = ", ".join(input_names)
    sig = f"{', '.join(f'{n}: {types[n]}' if n in types else n for n in input_names)} -> {', '.join(output_names)}"
    call = ", ".join(f"{i}={i}" for i in input_names)
    ret = ", ".join(f"{o}=out.{o}" for o in output_names)
    return ("class Specialist(dspy.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            f"        self.solve = dspy.ChainOfThought(\"{sig}\", instructions=\"Solve the request step by step.\")\n\n"
            f"    def forward(self, {args}):\n"
            f"        out = self.solve({call})\n"
            f"        return dspy.Prediction({ret})\n")


def program_contract(input_names: Sequence[str], output_names: Sequence[str], tools: Sequence[str],
                     input_types: Mapping[str, str] | None = None) -> str:
    args = ", ".join(input_names)
    outs = ", ".join(f"{o}=..." for o in output_names)
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
        + starter_program(input_names, output_names, input_types)
        + "Return only the Python source."
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


def source_problem(source: str) -> str | None:
    """Why the sandbox refuses `source` (policy, compile error or a bad PROFILE line), or None."""
    res = compile_program(source)
    reasons = list(res.reasons)
    problem = declared_profile(source)[1]
    if problem:
        reasons.append(problem)
    if res.ok and not problem:
        return None
    return "the new program was rejected by the sandbox: " + "; ".join(reasons)


def _check_source(action: str, slot: int | None, source: str) -> Edit | None:
    problem = source_problem(source)
    return None if problem is None else _rejected(action, slot, "sandbox_rejected", problem, source)


def _normal_action(value: Any) -> str:
    return str(value or "").strip().lower().replace(" ", "_").replace("-", "_")


class Reflector:
    """Runs SelectAction then the chosen edit on the reflection LM, repairing rejected answers.

    Args:
        reflection_lm: the reflection LM.
        input_names, output_names, tools: the program contract (task inputs, fallback outputs, tools: their
            names, or a mapping name -> function, whose first parameter a structured program's query goes to).
        max_repair_attempts: repair calls per stage after an answer is rejected before the gate (see repair.py).
        proposal_format: "code" (the LM writes specialist source), "structured" (it fills a ProgramSpec that
            we render; see structured.py) or "auto" (code, then structured for a target once `auto_after`
            recent code proposals for it were rejected before the gate).
        auto_after: the rejections after which "auto" switches a target to structured.
        unusable_programs: "reject" (an answer cut off at the token limit, or a program the sandbox refuses or
            cannot compile, is rejected before the gate, or repaired) or "gate" (as the paper ran: such an answer
            is adopted as written and the child goes to the minibatch gate, charged like any other; requests
            routed to a program that does not compile run the frozen fallback). The edit records what was wrong.
        context_tokens: the reflection LM's context window in tokens (None: read from the LM; see
            `reflection.budget.context_window`). The traces get what the window leaves beside the rest of the
            prompt and the answer (`trace_tokens`).
    """

    def __init__(self, reflection_lm: Any, *, input_names: Sequence[str], output_names: Sequence[str],
                 tools: Sequence[str] = (), max_repair_attempts: int = 1, proposal_format: str = "code",
                 auto_after: int = 2, context_tokens: int | None = None, unusable_programs: str = "reject",
                 schedule: Any = None):
        if proposal_format not in PROPOSAL_FORMATS:
            raise ValueError(f"proposal_format={proposal_format!r}: expected one of {', '.join(PROPOSAL_FORMATS)}")
        self.lm = reflection_lm
        self.input_names, self.tools = tuple(input_names), tuple(tools)
        self.tool_args = tuple(structured.first_parameter(tools[t]) for t in self.tools) \
            if isinstance(tools, Mapping) else ()
        self.max_repair_attempts, self.proposal_format, self.auto_after = max_repair_attempts, proposal_format, \
            auto_after
        self.schedule = schedule  # a search.schedule.Schedule, when the caller wants the step record
        self.context_tokens = context_tokens
        if unusable_programs not in UNUSABLE_PROGRAMS:
            raise ValueError(f"unusable_programs={unusable_programs!r}: expected one of {', '.join(UNUSABLE_PROGRAMS)}")
        self.unusable_programs = unusable_programs
        self.input_types: dict[str, str] = {}
        self.set_output_names(output_names)
        self.select = dspy.Predict(sig.SelectAction)
        self.activate = dspy.Predict(sig.ActivateSlot)
        self.rewrite_program = dspy.Predict(sig.RewriteProgram)
        self.rewrite_description = dspy.Predict(sig.RewriteDescription)
        self.rewrite_router = dspy.Predict(sig.RewriteRouter)
        activate_spec, rewrite_spec = structured.signatures_for(self.tools)
        self.activate_spec, self.rewrite_program_spec = dspy.Predict(activate_spec), dspy.Predict(rewrite_spec)
        self._local = threading.local()   # the current proposal's images (concurrent proposals: one per thread)

    def set_output_names(self, output_names: Sequence[str], input_types: Mapping[str, str] | None = None) -> None:
        """The fallback's output fields, which every specialist must also return (and the request fields that
        hold one of DSPy's types, {name: "dspy.Image"}, which the contract's example declares)."""
        self.output_names = tuple(output_names)
        if input_types is not None:
            self.input_types = dict(input_types)
        self.contract = program_contract(self.input_names, self.output_names or ("answer",), self.tools,
                                         self.input_types)
        self.spec_contract = structured.Contract(self.input_names, self.output_names or ("answer",), self.tools,
                                                 self.tool_args)

    def window(self) -> int:
        """The reflection LM's context window in tokens (`context_tokens`, else read from the LM)."""
        return self.context_tokens or budget.context_window(self.lm)

    def trace_tokens(self, parent: Library, history: Sequence[ProposalRecord] = ()) -> int:
        """Tokens the minibatch's records may take in this proposal's calls: the window less the answer's
        reserve and the largest rest-of-prompt any of its calls sends (instructions, contract, router, every
        description, the longest program, the history and, with repairs on, a previous answer)."""
        window = self.window()
        sources = [s.program_source or "" for _, s in parent.items()]
        contract = max(self.contract, structured.spec_contract_text(self.spec_contract), key=len)
        rest = [SIGNATURE_TEXT, contract, parent.router, render_slots(parent), max(sources, key=len, default=""),
                render_history(history), render_usage(parent, ())]
        if self.max_repair_attempts:
            rest.append("x" * ANSWER_CHARS)
        fixed = budget.estimate_tokens("\n".join(rest)) + ADAPTER_TOKENS
        return budget.trace_budget(window, budget.output_reserve(self.lm, window), fixed)

    def _call(self, predictor: dspy.Predict, note: RepairNote | None = None, adapter: Any = None,
              **kwargs: Any) -> dspy.Prediction:
        """One reflection LM call; every text input has DSPy's field markers made inert (router text,
        descriptions and sources are LM-written; the traces are rendered quoted already). A repair call also
        gets its previous answer and the problem. An answer that hit the token limit, or that does not parse,
        raises a `Rejection` (repairable)."""
        if note is not None:
            predictor = with_repair_fields(predictor)
            kwargs.update(note.fields())
        kwargs = {k: defang(v) if isinstance(v, str) else v for k, v in kwargs.items()}
        t0 = time.perf_counter()
        images = getattr(self._local, "images", None)
        if images:   # the requests' images (dspy.Type inputs) go to the reflection LM as structured content
            predictor = dspy.Predict(predictor.signature.append(
                "images", dspy.InputField(desc="the images (and other media) the traces refer to as [image k]"),
                type_=list[dspy.Type]))
            kwargs["images"] = list(images)
        watch = FinishWatch()
        max_tokens = (getattr(self.lm, "kwargs", None) or {}).get("max_tokens")
        context = {"adapter": adapter} if adapter is not None else {}
        try:
            with dspy.context(lm=self.lm, trace=None, callbacks=[*dspy.settings.callbacks, watch], **context), \
                    role("reflection"):
                out = predictor(**kwargs)
        except AdapterParseError as e:
            cut = truncation(watch, max_tokens)
            fields = ", ".join(predictor.signature.output_fields)
            raise cut or Rejection("unparseable", f"the answer could not be read as the fields {fields}: write "
                                   "each field, in the requested format", str(e.lm_response or "")) from None
        finally:
            if self.schedule is not None:
                self.schedule.record("reflection", 1, 1, t0, time.perf_counter())
        cut = truncation(watch, max_tokens)
        if cut is not None:
            if self.unusable_programs != "gate":
                raise cut
            self._admit(f"the answer stopped at the token limit (max_tokens={max_tokens})")
        return out

    def _admit(self, problem: str) -> None:
        """unusable_programs="gate": adopt the answer, noting what was wrong with it."""
        admitted = getattr(self._local, "admitted", None)
        if admitted is not None:
            admitted.append(problem)

    def _checked(self, source: str, answer: str | None = None) -> str:
        """`source`, or a `Rejection` (sandbox_rejected) -- with unusable_programs="gate", the source anyway,
        the problem noted."""
        problem = source_problem(source)
        if problem is None:
            return source
        if self.unusable_programs == "gate":
            self._admit(problem)
            return source
        raise Rejection("sandbox_rejected", problem, answer if answer is not None else source, source=source)

    def propose(self, parent: Library, rows: Sequence[Row], results: Sequence[RowResult],
                history: Sequence[ProposalRecord] = ()) -> Edit:
        """One proposal for `parent` from its minibatch `results` on `rows`; `history` is the recent
        proposals on its lineage (shown to action selection, and read by proposal_format="auto")."""
        images: list = []
        self._local.admitted = []
        self._local.trace_tokens = self.trace_tokens(parent, history)
        traces = render_traces(rows, results, images, self._local.trace_tokens)
        self._local.images = images
        attempts: list[Attempt] = []
        try:
            action, slot = with_repairs("select", lambda note: self._select(parent, results, history, traces, note),
                                        self.max_repair_attempts, attempts)
        except Rejection as rej:
            action, slot = rej.target
            return Edit(action, slot, None, rej.reason, failure=rej.failure, attempts=tuple(attempts))
        except Exception as e:  # noqa: BLE001 - the LM call raised: a rejected proposal, never a crash
            return Edit(None, None, None, f"action selection failed: {type(e).__name__}: {str(e)[:300]}",
                        failure="selection_failed", attempts=tuple(attempts))
        return self._apply(parent, rows, results, history, traces, action, slot, attempts)

    def _apply(self, parent: Library, rows: Sequence[Row], results: Sequence[RowResult],
               history: Sequence[ProposalRecord], traces: str, action: str, slot: int | None,
               attempts: list[Attempt]) -> Edit:
        """The chosen edit, with repairs, as an Edit carrying every attempt."""
        if action == "rewrite_program":   # Table 6: no sibling descriptions, not even inside the router's trace
            traces = render_traces(rows, for_program_rewrite(results),
                                   budget_tokens=getattr(self._local, "trace_tokens", None))
        fmt = self._format(action, slot, history)
        try:
            edit = with_repairs(action, lambda note: self._edit(parent, action, slot, traces, note, fmt),
                                self.max_repair_attempts, attempts)
        except Rejection as rej:
            return Edit(action, slot, None, rej.reason, rejected_source=rej.source, failure=rej.failure,
                        attempts=tuple(attempts), format=fmt)
        except Exception as e:  # noqa: BLE001
            return Edit(action, slot, None, f"{action} failed: {type(e).__name__}: {str(e)[:300]}",
                        failure="edit_failed", attempts=tuple(attempts), format=fmt)
        return replace(edit, attempts=tuple(attempts), format=fmt,
                       admitted=tuple(getattr(self._local, "admitted", None) or ()))

    def _select(self, parent: Library, results: Sequence[RowResult], history: Sequence[ProposalRecord],
                traces: str, note: RepairNote | None) -> tuple[str, int | None]:
        choice = self._call(self.select, note, router=parent.router, specialists=render_slots(parent),
                            usage=render_usage(parent, results), history=render_history(history) or "none",
                            traces=traces)
        answer = f"action: {choice.action}\nslot: {choice.slot}"
        action, slot = _normal_action(choice.action), parse_slot_answer(choice.slot)
        if action not in ACTIONS:   # recorded without an action: only ACTIONS are valid action names
            raise Rejection("unknown_action", f"unknown action {action!r} (expected one of {', '.join(ACTIONS)})",
                            answer, target=(None, slot))
        if action == "activate" and parent.inactive_ids() and slot not in parent.inactive_ids():
            slot = parent.inactive_ids()[0]  # any free slot serves an activation: take the lowest
        problem = self._validate_target(parent, action, slot)
        if problem:
            raise Rejection("invalid_target", problem, answer, target=(action, slot))
        return action, slot

    def _format(self, action: str, slot: int | None, history: Sequence[ProposalRecord]) -> str | None:
        """The format of a source-writing edit (None for the others)."""
        if action not in ("activate", "rewrite_program"):
            return None
        same = [p for p in history if p.action == action and (action == "activate" or p.slot == slot)]
        rejected = sum(1 for p in same if p.failure in REPAIRABLE and (p.details or {}).get("format") == "code")
        return structured.choose_format(self.proposal_format, rejected, self.auto_after)

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

    def _edit(self, parent: Library, action: str, slot: int | None, traces: str, note: RepairNote | None = None,
              fmt: str | None = None) -> Edit:
        """The chosen edit; an unusable answer raises a `Rejection` (which the caller may repair)."""
        if action == "deactivate":  # quarantine: no LM call, program text kept
            return Edit(action, slot, parent.with_slot(slot, parent.slot(slot).deactivated()))
        if action == "rewrite_router":
            out = self._call(self.rewrite_router, note, traces=traces, router=parent.router,
                             specialists=render_slots(parent))
            text = str(out.new_router or "").strip()
            if not text:
                raise Rejection("bad_output", "rewrite_router returned an empty instruction", "")
            return self._changed(parent, action, None, parent.with_router(text))
        target = parent.slot(slot)
        if action == "activate":
            description, source, profile = (self._activate_structured if fmt == "structured" else
                                            self._activate_code)(parent, slot, traces, note)
            return Edit(action, slot, parent.with_slot(slot, target.activated(description, source, profile)))
        if action == "rewrite_program":
            source = self._write_program(target.description, target.program_source, traces, note, fmt)
            return self._changed(parent, action, slot, parent.with_slot(slot, target.with_program(source)))
        # rewrite_description
        out = self._call(self.rewrite_description, note, traces=traces, specialists=render_slots(parent),
                         target_slot=str(slot), program=target.program_source)
        text = str(out.new_description or "").strip()
        if not text or text.upper() == "INACTIVE":
            raise Rejection("bad_output", "rewrite_description returned an empty description", text)
        return self._changed(parent, action, slot, parent.with_slot(slot, target.with_description(text)))

    def _write_program(self, description: str, program: str, traces: str, note: RepairNote | None,
                       fmt: str | None) -> str:
        """The reflection LM's rewrite of `program` for a slot described by `description` (checked source)."""
        if fmt == "structured":
            shape = self._call(self.rewrite_program_spec, note, dspy.JSONAdapter(), traces=traces,
                               description=description, program=program,
                               program_contract=structured.spec_contract_text(self.spec_contract)).shape
            spec = structured.spec_from(shape, self.spec_contract)
            return self._checked(structured.render(spec, self.spec_contract, declared_profile(program)[0]),
                                 structured.answer_text(shape))
        out = self._call(self.rewrite_program, note, traces=traces, description=description, program=program,
                         program_contract=self.contract)
        return self._checked(strip_code(out.new_program), str(out.new_program or ""))

    def _activate_code(self, parent: Library, slot: int, traces: str,
                       note: RepairNote | None) -> tuple[str, str, str]:
        out = self._call(self.activate, note, traces=traces, router=parent.router, specialists=render_slots(parent),
                         target_slot=str(slot), program_contract=self.contract)
        answer = f"description: {out.description}\nprofile: {out.profile}\nprogram:\n{out.program}"
        profile, description = _activation_fields(out, answer)
        return description, self._checked(strip_code(out.program), answer), profile

    def _activate_structured(self, parent: Library, slot: int, traces: str,
                             note: RepairNote | None) -> tuple[str, str, str]:
        out = self._call(self.activate_spec, note, dspy.JSONAdapter(), traces=traces, router=parent.router,
                         specialists=render_slots(parent), target_slot=str(slot),
                         program_contract=structured.spec_contract_text(self.spec_contract)).activation
        answer = structured.answer_text(out)
        profile, description = _activation_fields(out, answer)
        spec = structured.spec_from(out, self.spec_contract)
        return description, self._checked(structured.render(spec, self.spec_contract, profile), answer), profile

    @staticmethod
    def _changed(parent: Library, action: str, slot: int | None, child: Library) -> Edit:
        if child.content_hash == parent.content_hash:
            return _rejected(action, slot, "no_change", f"{action} changed nothing")
        return Edit(action, slot, child)


def _activation_fields(out: Any, answer: str) -> tuple[str, str]:
    """(profile, description) of an activation answer, or a `Rejection` (bad_output) saying what to fix."""
    profile = str(out.profile or "").strip().strip('"').lower()
    description = str(out.description or "").strip()
    if profile not in ("fast", "deep"):
        raise Rejection("bad_output", f"activate returned profile {out.profile!r}; expected fast or deep", answer)
    if not description or description.upper() == "INACTIVE":
        raise Rejection("bad_output", "activate returned no description", answer)
    return profile, description
