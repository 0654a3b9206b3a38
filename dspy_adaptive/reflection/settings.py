"""Who writes proposals and how: the reflection LM, dspy.GEPA's proposer hooks, repairs and the format of new
programs; validated here, and the reflector they build."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import dspy

from dspy_adaptive import checks
from dspy_adaptive.data import InputError
from dspy_adaptive.lm.local import is_in_process
from dspy_adaptive.reflection.external import ProposerReflector
from dspy_adaptive.reflection.propose import UNUSABLE_PROGRAMS, Reflector
from dspy_adaptive.reflection.structured import PROPOSAL_FORMATS


@dataclass(frozen=True)
class ReflectionSettings:
    """Args (AdaptiveGEPA's names in brackets where they differ):
        lm (reflection_lm), instruction_proposer, code_proposer: see AdaptiveGEPA's docstring. `lm` may be None
            only with a proposer or a component_selector: the run then reflects with the LM configured at
            compile (`resolved`).
        component_selector: a callable (gepa's ReflectionComponentSelector protocol) that names the component
            to act on, or None: the reflection LM selects each action and its target.
        max_repair_attempts: when a reflection answer is rejected before the gate (the sandbox policy, a compile
            error, an answer that does not parse, an answer cut off at the token limit, an impossible target),
            the reflection LM gets the exact reason and its own answer back and may answer again, this many times
            per stage. Repairs are reflection calls, never scored calls; the run record keeps each attempt.
        proposal_format: how new specialist programs are written: "code" (the reflection LM writes the source),
            "structured" (it fills a typed specification -- the program's shape among predict, chain of thought,
            retrieve-then-answer over a tool and draft-and-check, plus its instructions -- and the source is
            generated from it, so it always passes the sandbox policy; suits small local reflection models) or
            "auto" (the default), chosen from the reflection LM: a GGUF model running in this process (the
            local engine, `lm.local`) gets "structured" from the start, since models that small do not write a
            valid dspy.Module; any other LM -- hosted, or served over HTTP on this machine (vLLM, Ollama) --
            starts with code and switches a target to structured after 2 recent code proposals for it were
            rejected before the gate. `resolved_format` is what a run uses (its identity records it).
        format_failure_feedback (add_format_failure_as_feedback): show reflection an unparseable LM answer with
            its failure.
        context_tokens (reflection_context_tokens): the reflection LM's context window in tokens; None reads it
            from the LM (a local engine's n_ctx, litellm's model info, else 32,768). What reflection reads of the
            feedback minibatch (requests, steps, outputs, feedback) is fitted into what the window leaves beside
            the rest of the prompt and the answer, shortening long values from the middle with a marker and
            keeping each request's closing part and question (`dspy_adaptive.reflection.budget`).
        unusable_programs: "reject" (default: a reflection answer cut off at its token limit, or a program the
            sandbox refuses or cannot compile, is rejected before the gate, or repaired) or "gate" (as the paper
            ran: such an answer is adopted as written and the child goes to the minibatch gate, charged like any
            other; requests routed to a program that does not compile run the frozen fallback). The proposal's
            record says what was wrong with the adopted answer (`details.admitted`).
    """

    lm: Any
    instruction_proposer: Callable | None = None
    code_proposer: Callable | None = None
    component_selector: Callable | None = None
    max_repair_attempts: int = 1
    proposal_format: str = "auto"
    format_failure_feedback: bool = False
    context_tokens: int | None = None
    unusable_programs: str = "reject"

    def __post_init__(self) -> None:
        checks.callable_or_none("instruction_proposer", self.instruction_proposer, "dspy.GEPA's proposer protocol")
        checks.callable_or_none("code_proposer", self.code_proposer, "dspy.GEPA's proposer protocol")
        checks.callable_or_none("component_selector", self.component_selector,
                                "gepa's ReflectionComponentSelector protocol")
        checks.integer("max_repair_attempts", self.max_repair_attempts, minimum=0)
        checks.one_of("proposal_format", self.proposal_format, PROPOSAL_FORMATS)
        checks.one_of("unusable_programs", self.unusable_programs, UNUSABLE_PROGRAMS)
        window = self.context_tokens
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 2048):
            raise InputError("reflection_context_tokens must be an integer >= 2048 (the reflection LM's context "
                             f"window in tokens) or None to read it from the LM, got {self.context_tokens!r}")
        if self.lm is None and not self.external:
            raise InputError("reflection_lm is required: pass a strong model, e.g. "
                             "reflection_lm=dspy.LM('openai/gpt-5', temperature=1.0)")

    @property
    def resolved_format(self) -> str:
        """The format a run uses: the given one, or for "auto" "structured" with an in-process local reflection
        model and "auto" (code, then structured after rejections) with any other."""
        if self.proposal_format == "auto" and is_in_process(self.lm):
            return "structured"
        return self.proposal_format

    @property
    def external(self) -> bool:
        """dspy.GEPA's hooks write (some of) the edits or choose the targets."""
        return any(x is not None for x in (self.instruction_proposer, self.code_proposer, self.component_selector))

    def resolved(self) -> "ReflectionSettings":
        """These settings with the LM that reflects in this run: `lm`, or -- with dspy.GEPA's hooks and no
        reflection_lm, as dspy.GEPA accepts them -- the LM configured now (`dspy.settings.lm`), said once in a
        warning, since action selection and activations still need an LM."""
        if self.lm is not None:
            return self
        lm = dspy.settings.lm
        if lm is None:
            raise InputError("reflection_lm is None and no LM is configured: with instruction_proposer, code_proposer "
                             "or component_selector the proposer writes the rewrites' text, but an LM still selects "
                             "each action and its target and writes activations. Pass reflection_lm=dspy.LM(...), or "
                             "dspy.configure(lm=...) before compile")
        warnings.warn(f"reflection_lm is None: the configured LM ({getattr(lm, 'model', type(lm).__name__)}) selects "
                      "each action and its target and writes activations; the proposer you gave writes the rewrites' "
                      "text. Pass reflection_lm=... to reflect with another LM.", UserWarning, stacklevel=3)
        return replace(self, lm=lm)

    def proposals_identity(self) -> dict[str, Any]:
        """What about the proposals changes a run's results (its identity, for resume)."""
        return {"format": self.resolved_format, "external": self.external,
                "max_repair_attempts": self.max_repair_attempts, "unusable_programs": self.unusable_programs,
                "context_tokens": self.context_tokens}

    def reflector(self, *, input_names: Sequence[str], tools: Mapping[str, Callable], schedule: Any = None
                  ) -> Reflector:
        """The reflector of a run whose requests have `input_names` and whose specialists may call `tools`."""
        common = dict(input_names=tuple(input_names), output_names=(), tools=dict(tools),
                      max_repair_attempts=self.max_repair_attempts, proposal_format=self.resolved_format,
                      context_tokens=self.context_tokens, unusable_programs=self.unusable_programs, schedule=schedule)
        if self.external:
            return ProposerReflector(self.lm, instruction_proposer=self.instruction_proposer,
                                     code_proposer=self.code_proposer, component_selector=self.component_selector,
                                     **common)
        return Reflector(self.lm, **common)
