"""dspy.GEPA's proposer and component-selector hooks, mapped onto Adaptive-GEPA's actions.

dspy.GEPA takes an `instruction_proposer` (gepa's ProposalFn) that writes a component's new text, and a
`code_proposer` (DSPy's CodeProposalFn) that writes a dspy.Flex module's new source. Adaptive-GEPA's
components are a library's texts, so the two map onto its rewrite actions:

    rewrite_router       component "router"                 -> instruction_proposer
    rewrite_description  component "slot<k>.description"    -> instruction_proposer
    rewrite_program      component "slot<k>.program"        -> code_proposer (else instruction_proposer)

    activate             component "slot<k>.description"    -> instruction_proposer, then the program:
                         component "slot<k>.program"        -> code_proposer (else the reflection LM)

The reflection LM (with no reflection_lm: the LM configured at compile) still selects the action and its
target. A proposer given here writes the rewrite's text instead of the reflection LM's edit call. A new slot
(activate) with an instruction_proposer gets the proposer's description, then a program written for that
description from a starter program (one ChainOfThought over the request's inputs) by the code_proposer, or
else by the reflection LM as a rewrite of the starter, and the profile its PROFILE line declares (else deep, the
fallback's); without an instruction_proposer the reflection LM writes the activation. When the reflection LM's
action selection cannot be used (it does not parse, names no action, or an impossible target, after its
repairs), the component is chosen as dspy.GEPA's default component_selector chooses it ('round_robin'): the
next component, in turn, that a given proposer writes on this library (an inactive slot's component means
activating it), so a proposer still gets its turn; the record's attempts say so.

A proposer is called inside the reflection LM's context (as dspy.GEPA does), with
`candidate` = every component of the parent library (and, for an activation, the new slot's: an empty
description and the starter program), `components_to_update` = [the target], and
`reflective_dataset` = {target: one record per minibatch request, gepa's shape: {"Inputs": the request's
input fields (images as dspy.Image objects), "Generated Outputs": the output fields or the error,
"Feedback": the metric's feedback}}. A program a proposer writes passes the sandbox policy like any other.

A custom `component_selector` (gepa's ReflectionComponentSelector protocol, a callable
`(state, trajectories, subsample_scores, candidate_idx, candidate) -> [component names]`) replaces the
reflection LM's action selection: it is called with `candidate` = every component of the parent library,
inactive slots included (their description reads INACTIVE), `trajectories` = the reflective records,
`subsample_scores` = the minibatch scores, `state` a minimal object whose `i` counts the selector's calls
(0, 1, ...: gepa's iteration counter; gepa's other state fields do not exist here) and `candidate_idx`
None. The first component it names that this library can act on sets the action: "router" ->
rewrite_router, an inactive slot's component -> activate it, an active slot's description / program ->
rewrite_description / rewrite_program. The edit is then written as usual.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import dspy

from dspy_adaptive.data import Row
from dspy_adaptive.lm.usage import role
from dspy_adaptive.program.library import Library
from dspy_adaptive.program.profiles import declared_profile
from dspy_adaptive.reflection.propose import Edit, Reflector, _check_source, _rejected, starter_program, strip_code
from dspy_adaptive.reflection.repair import Attempt
from dspy_adaptive.reflection.traces import describe_route, render_traces
from dspy_adaptive.schema import ProposalRecord, RowResult


def library_components(library: Library) -> dict[str, str]:
    """A library's text components, named as the proposers see them."""
    out = {"router": library.router}
    for k in library.active_ids():
        slot = library.slot(k)
        out[f"slot{k}.description"] = slot.description
        out[f"slot{k}.program"] = slot.program_source
    return out


@dataclass(frozen=True)
class SelectorState:
    """What a component_selector gets as gepa's `state`: `i`, the count of earlier selections."""

    i: int


def selectable_components(library: Library) -> dict[str, str]:
    """Every component a component_selector may name: the router and each slot's description and program."""
    out = {"router": library.router}
    for k, slot in library.items():
        out[f"slot{k}.description"] = slot.description
        out[f"slot{k}.program"] = slot.program_source
    return out


def component_action(library: Library, names: Sequence[str]) -> tuple[str | None, int | None]:
    """The action a component_selector's answer asks for on `library` (see the module docstring)."""
    for name in names or ():
        if name == "router":
            if library.active_ids():
                return "rewrite_router", None
            continue
        head, _, part = str(name).partition(".")
        if not head.startswith("slot") or not head[4:].isdigit() or part not in ("description", "program"):
            continue
        k = int(head[4:])
        if not 1 <= k <= library.max_specialists:
            continue
        if not library.slot(k).active:
            return "activate", k
        return ("rewrite_description" if part == "description" else "rewrite_program"), k
    return None, None


def reflective_records(rows: Sequence[Row], results: Sequence[RowResult]) -> list[dict[str, Any]]:
    """gepa's reflective dataset records for a minibatch (labels never included: inputs, outputs, feedback)."""
    records = []
    for row, res in zip(rows, results):
        outputs: Any = dict(res.output) if res.output is not None else f"the program failed: {res.error}"
        records.append({"Inputs": dict(row.inputs), "Generated Outputs": outputs,
                        "Feedback": f"{res.feedback} (score {res.score:g}; {describe_route(res)})"})
    return records


class ProposerReflector(Reflector):
    """A Reflector whose rewrite actions' text comes from dspy.GEPA-style proposers (see the module docstring)."""

    def __init__(self, reflection_lm: Any, *, instruction_proposer: Callable | None = None,
                 code_proposer: Callable | None = None, component_selector: Callable | None = None, **kwargs: Any):
        super().__init__(reflection_lm, **kwargs)
        self.instruction_proposer, self.code_proposer = instruction_proposer, code_proposer
        self.component_selector = component_selector
        self._batch = threading.local()
        self._selections = 0
        self._selections_lock = threading.Lock()

    def propose(self, parent: Library, rows: Sequence[Row], results: Sequence[RowResult],
                history: Sequence[ProposalRecord] = ()) -> Edit:
        self._batch.rows, self._batch.results = tuple(rows), tuple(results)
        self._batch.description = None
        if self.component_selector is None:
            edit = super().propose(parent, rows, results, history)
            if not (edit.rejected and all(a.stage == "select" for a in edit.attempts)):
                return edit
            return self._round_robin(parent, rows, results, history, edit)   # the LM's choice was unusable
        images: list = []
        self._local.admitted = []
        self._local.trace_tokens = self.trace_tokens(parent, history)
        traces = render_traces(rows, results, images, self._local.trace_tokens)
        self._local.images = images
        with self._selections_lock:
            state = SelectorState(self._selections)
            self._selections += 1
        try:
            names = self.component_selector(state, reflective_records(rows, results), [r.score for r in results],
                                            None, selectable_components(parent))
        except Exception as e:  # noqa: BLE001 - the user's selector failed: a rejected proposal, as an LM failure
            return _rejected(None, None, "selection_failed",
                             f"component_selector failed: {type(e).__name__}: {str(e)[:300]}")
        action, slot = component_action(parent, list(names or ()))
        if action is None:
            return _rejected(None, None, "unknown_action", f"component_selector chose {list(names or ())!r}: no "
                             "component this library can act on")
        problem = self._validate_target(parent, action, slot)
        if problem:
            return _rejected(action, slot, "invalid_target", problem)
        return self._apply(parent, rows, results, history, traces, action, slot, [])

    def _round_robin(self, parent: Library, rows: Sequence[Row], results: Sequence[RowResult],
                     history: Sequence[ProposalRecord], failed: Edit) -> Edit:
        """dspy.GEPA's default component selection ('round_robin'), when the reflection LM's action selection
        could not be used: the next component, in turn, that a given proposer writes on this library."""
        names = [n for n in selectable_components(parent) if self._writes(component_action(parent, [n])[0])]
        if not names:
            return failed
        with self._selections_lock:
            start = self._selections % len(names)
            self._selections += 1
        action, slot = component_action(parent, names[start:] + names[:start])
        images: list = []
        traces = render_traces(rows, results, images, self._local.trace_tokens)
        self._local.images = images
        chosen = f"{action} slot {slot}" if slot is not None else action
        attempts = [*failed.attempts, Attempt("select", len(failed.attempts), None,
                                              f"round robin chose {chosen}: the selection above could not be used", "")]
        return self._apply(parent, rows, results, history, traces, action, slot, attempts)

    def _writes(self, action: str | None) -> bool:
        """Whether a proposer given here writes (part of) `action`'s edit."""
        if action == "rewrite_program":
            return self.code_proposer is not None or self.instruction_proposer is not None
        return action in ("activate", "rewrite_router", "rewrite_description") and self.instruction_proposer is not None

    def _edit(self, parent: Library, action: str, slot: int | None, traces: str, note: Any = None,
              fmt: str | None = None) -> Edit:
        if action == "activate" and self.instruction_proposer is not None:
            return self._activate(parent, slot, traces, note, fmt)
        proposer, component = self._proposer_for(action, slot)
        if proposer is None:
            return super()._edit(parent, action, slot, traces, note, fmt)
        description = parent.slot(slot).description if slot is not None else None
        text = self._propose(proposer, library_components(parent), component, description)
        if text is None:
            return _rejected(action, slot, "bad_output", f"the proposer returned no text for {component!r}")
        if action == "rewrite_router":
            return self._changed(parent, action, None, parent.with_router(text.strip()))
        target = parent.slot(slot)
        if action == "rewrite_description":
            if text.strip().upper() == "INACTIVE":
                return _rejected(action, slot, "bad_output", "the proposer returned an empty description")
            return self._changed(parent, action, slot, parent.with_slot(slot, target.with_description(text.strip())))
        source = strip_code(text)
        rejected = _check_source(action, slot, source)
        if rejected and self.unusable_programs != "gate":
            return rejected
        if rejected:
            self._admit(rejected.reason or "")
        return self._changed(parent, action, slot, parent.with_slot(slot, target.with_program(source)))

    def _propose(self, proposer: Callable, candidate: dict[str, str], component: str,
                 description: str | None = None) -> str | None:
        """`proposer`'s new text for `component` (None: it gave none), called in the reflection LM's context."""
        dataset = {component: reflective_records(self._batch.rows, self._batch.results)}
        with dspy.context(lm=self.lm, trace=None), role("reflection"):
            if proposer is self.code_proposer:
                out = proposer(candidate=candidate, reflective_dataset=dataset, components_to_update=[component],
                               task_descriptions={component: description or ""},
                               context_blurbs={component: self.contract})
            else:
                out = proposer(candidate=candidate, reflective_dataset=dataset, components_to_update=[component])
        text = out.get(component) if isinstance(out, dict) else None
        return text.strip() if isinstance(text, str) and text.strip() else None

    def _activate(self, parent: Library, slot: int, traces: str, note: Any, fmt: str | None) -> Edit:
        """A new slot with an instruction_proposer: the proposer writes its description; its program is written
        for that description from a starter program, by the code_proposer or else the reflection LM (a
        rewrite of the starter); its profile is the program's PROFILE line, else deep (the fallback's)."""
        starter = starter_program(self.input_names, self.output_names or ("answer",), self.input_types)
        description_name, program_name = f"slot{slot}.description", f"slot{slot}.program"
        candidate = {**library_components(parent), description_name: "", program_name: starter}
        description = self._batch.description        # a repair of this activation reuses the description
        if description is None:
            description = self._propose(self.instruction_proposer, candidate, description_name)
            if description is None or description.upper() == "INACTIVE":
                return _rejected("activate", slot, "bad_output", "the instruction_proposer returned no description "
                                 f"for {description_name!r}")
            self._batch.description = description
        if self.code_proposer is not None:
            text = self._propose(self.code_proposer, {**candidate, description_name: description}, program_name,
                                 description)
            if text is None:
                return _rejected("activate", slot, "bad_output", f"the code_proposer returned no program for "
                                 f"{program_name!r}")
            source = self._checked(strip_code(text))
        else:
            source = self._write_program(description, starter, traces, note, fmt)
        profile = declared_profile(source)[0] or "deep"
        return Edit("activate", slot, parent.with_slot(slot, parent.slot(slot).activated(description, source, profile)))

    def _proposer_for(self, action: str, slot: int | None) -> tuple[Callable | None, str]:
        if action == "rewrite_router":
            return self.instruction_proposer, "router"
        if action == "rewrite_description":
            return self.instruction_proposer, f"slot{slot}.description"
        if action == "rewrite_program":
            return self.code_proposer or self.instruction_proposer, f"slot{slot}.program"
        return None, ""


__all__ = ["ProposerReflector", "SelectorState", "component_action", "library_components", "reflective_records",
           "selectable_components"]
