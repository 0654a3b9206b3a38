"""Structured edits: the reflection LM fills a typed specification and we write the specialist's source.

A small or mid-sized reflection model often cannot write a valid dspy.Module through an open interface
(it writes prose, forgets `super().__init__()`, imports what the sandbox refuses). In structured form it
only chooses among fixed program shapes and writes text:

    kind            predict | chain_of_thought | retrieve_then_answer | draft_and_check
    main_step       the main step's instructions
    second_step     the query step's instructions (retrieve_then_answer) or the checker's (draft_and_check)
    tool            the tool a retrieve_then_answer program searches with (one of the run's tools)
    profile         fast | deep (activations; a rewrite keeps or changes it)

`render(spec, contract)` writes the source. Every generated source uses only `dspy.Module`,
`dspy.Predict`/`dspy.ChainOfThought` with plain string signatures, the declared tool and
`dspy.Prediction`; every piece of LM text enters it as an ASCII string literal (`ascii()`), so what the
model wrote can never become code, and the source always passes the sandbox policy (tests check this for
every kind, with hostile text). The inputs are the task's inputs and the outputs the fallback's outputs, so
the program fits the contract by construction.

With DSPy's JSONAdapter the spec's choices are JSON-schema enums; the local llama.cpp engine compiles the
schema to a grammar, so even a 135M model fills the blanks with valid values.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Literal, Sequence, get_args

import dspy
import pydantic

from dspy_adaptive.reflection.repair import Rejection
from dspy_adaptive.reflection.signatures import TRACES_DESC
from dspy_adaptive.schema import clip

ModuleKind = Literal["predict", "chain_of_thought", "retrieve_then_answer", "draft_and_check"]
MODULE_KINDS: tuple[str, ...] = get_args(ModuleKind)
ProposalFormat = Literal["code", "structured", "auto"]
PROPOSAL_FORMATS: tuple[str, ...] = get_args(ProposalFormat)

INSTRUCTION_CHARS = 4000     # one instruction text in a generated program (the bridge allows 12,000)

DEFAULT_CHECK = ("Check the draft against the request: fix any error or unmet requirement, then give the final "
                 "answer.")


@dataclass(frozen=True)
class Contract:
    """What every specialist must fit: the task's input names, the fallback's output names, the tools."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    tools: tuple[str, ...] = ()
    tool_args: tuple[str, ...] = ()     # each tool's query parameter (tools take keyword arguments only)

    def query_arg(self, tool: str) -> str:
        args = dict(zip(self.tools, self.tool_args))
        return args.get(tool) or "query"


def first_parameter(fn: Any) -> str:
    """The name of a tool's first parameter ("query" when it cannot be read)."""
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    except (TypeError, ValueError):
        return "query"
    name = params[0].name if params else "query"
    return name if name.isidentifier() and not name.startswith("_") else "query"


@dataclass(frozen=True)
class ProgramSpec:
    """A specialist program as a filled-in specification."""

    kind: str
    instructions: str
    second_step: str = ""
    tool: str = ""


KIND_DESC = ("the program's shape: predict (one direct step), chain_of_thought (reason step by step, then "
             "answer), retrieve_then_answer (write a search query, search with the tool, answer from the "
             "passages), draft_and_check (draft an answer, then a second step checks and fixes it)")
INSTRUCTIONS_DESC = "the instructions of the main (answering or drafting) step: how to handle these requests"
SECOND_DESC = ("retrieve_then_answer: how to write one more search query (the request itself is always searched); "
               "draft_and_check: what the checking step verifies and fixes; otherwise empty")
TOOL_DESC = "retrieve_then_answer only: the name of the tool to search with (see the contract); otherwise none"

# Length bounds are part of the JSON schema: a grammar-constrained local model cannot ramble past them into its
# token limit, and a hosted model's longer answer fails validation and is repaired.
DESCRIPTION_CHARS, MAIN_CHARS, SECOND_CHARS, TOOL_CHARS = 400, 800, 500, 40


class ProgramShape(pydantic.BaseModel):
    """A specialist program as a filled-in specification (what a structured rewrite writes)."""

    kind: ModuleKind = pydantic.Field(description=KIND_DESC)
    main_step: str = pydantic.Field(description=INSTRUCTIONS_DESC, max_length=MAIN_CHARS)
    second_step: str = pydantic.Field(description=SECOND_DESC, max_length=SECOND_CHARS)
    tool: str = pydantic.Field(description=TOOL_DESC, max_length=TOOL_CHARS)


class Activation(pydantic.BaseModel):
    """A new specialist as a filled-in specification (what a structured activation writes)."""

    description: str = pydantic.Field(description="what requests this specialist handles: a broad class, "
                                      "distinct from the other specialists", max_length=DESCRIPTION_CHARS)
    kind: ModuleKind = pydantic.Field(description=KIND_DESC)
    main_step: str = pydantic.Field(description=INSTRUCTIONS_DESC, max_length=MAIN_CHARS)
    second_step: str = pydantic.Field(description=SECOND_DESC, max_length=SECOND_CHARS)
    tool: str = pydantic.Field(description=TOOL_DESC, max_length=TOOL_CHARS)
    profile: Literal["fast", "deep"] = pydantic.Field(description="fast (cheap, no extended reasoning) or deep "
                                                      "(slower, more reasoning)")


class ActivateSlotSpec(dspy.Signature):
    """Create a new specialist for a free slot of a routed program library, as a filled-in specification.

    Give a faithful, concise description of the broad class of requests it handles — the router reads it to
    decide where requests go, so state a general responsibility distinct from the other specialists, not
    single instances — then the program's shape and its instructions, and its LM profile. Keep every text
    short and general."""

    traces: str = dspy.InputField(desc=TRACES_DESC)
    router: str = dspy.InputField(desc="the router's instruction")
    specialists: str = dspy.InputField(desc="every slot with its description")
    target_slot: str = dspy.InputField(desc="the free slot being activated")
    program_contract: str = dspy.InputField(desc="the request fields, answer fields and tools")
    activation: Activation = dspy.OutputField(desc="the new specialist")


class RewriteProgramSpec(dspy.Signature):
    """Redesign one specialist's program so it handles its requests better, judging from the records (scores,
    feedback, errors, intermediate steps), as a filled-in specification: its shape and instructions. Keep
    what works, fix what fails; keep every text short and general."""

    traces: str = dspy.InputField(desc=TRACES_DESC)
    description: str = dspy.InputField(desc="what this specialist is responsible for")
    program: str = dspy.InputField(desc="this specialist's current source")
    program_contract: str = dspy.InputField(desc="the request fields, answer fields and tools")
    shape: ProgramShape = dspy.OutputField(desc="the new program's specification")


NO_TOOL = "none"


def kinds_for(tools: Sequence[str]) -> tuple[str, ...]:
    """The shapes in the order the schema lists them: with tools, the tool-using shape first. A small model decoding
    under a grammar picks the first listed value far more often than the others (SmolLM2-135M chose `predict`, then
    first, in every activation of the demo), so a run's tools would otherwise go unused."""
    if not tools:
        return MODULE_KINDS
    return ("retrieve_then_answer", *(k for k in MODULE_KINDS if k != "retrieve_then_answer"))


def signatures_for(tools: Sequence[str]) -> tuple[type[dspy.Signature], type[dspy.Signature]]:
    """(ActivateSlotSpec, RewriteProgramSpec) whose `tool` is an enum of the run's tools and "none", so a
    schema-constrained model can only name a tool that exists (the plain signatures above accept any text and
    `spec_from` checks it), and whose `kind` lists the shapes in `kinds_for`'s order."""
    choice = Literal[(*tools, NO_TOOL)]  # type: ignore[valid-type]
    tool_field = (choice, pydantic.Field(description=TOOL_DESC))
    kind_field = (Literal[kinds_for(tools)], pydantic.Field(description=KIND_DESC))  # type: ignore[valid-type]
    shape = pydantic.create_model("ProgramShape", __base__=ProgramShape, tool=tool_field, kind=kind_field)
    activation = pydantic.create_model("Activation", __base__=Activation, tool=tool_field, kind=kind_field)
    activate = ActivateSlotSpec.with_updated_fields("activation", type_=activation)
    rewrite = RewriteProgramSpec.with_updated_fields("shape", type_=shape)
    return activate, rewrite


def spec_contract_text(contract: Contract) -> str:
    """The contract as the structured calls read it."""
    tools = (", ".join(contract.tools) + " (each takes a query string and returns passages)") if contract.tools \
        else "none (do not choose retrieve_then_answer)"
    return (f"Request fields: {', '.join(contract.inputs)}. Answer fields: {', '.join(contract.outputs)}. "
            f"Tools: {tools}. You do not write code: choose the shape and write the instructions; the program "
            "is generated from them.")


def spec_from(answer: Any, contract: Contract) -> ProgramSpec:
    """A ProgramSpec from a structured answer (an `Activation` or `ProgramShape`, or any object with kind,
    main_step, second_step and tool), or a `Rejection` (bad_output) saying what to fix."""
    text = answer_text(answer)
    kind = str(getattr(answer, "kind", "") or "").strip().lower().replace("-", "_").replace(" ", "_")
    if kind not in MODULE_KINDS:
        raise Rejection("bad_output", f"kind {kind!r} is not one of {', '.join(MODULE_KINDS)}", text)
    instructions = str(getattr(answer, "main_step", "") or "").strip()
    if not instructions:
        raise Rejection("bad_output", "main_step is empty: write how the main step handles the requests", text)
    tool = str(getattr(answer, "tool", "") or "").strip().strip("`'\"").rstrip("()")
    tool = "" if tool.lower() == NO_TOOL else tool
    if kind == "retrieve_then_answer":
        if not contract.tools:
            raise Rejection("bad_output", "retrieve_then_answer needs a tool and this run has none: choose "
                            "another kind", text)
        if tool not in contract.tools:
            if len(contract.tools) == 1 and not tool:
                tool = contract.tools[0]
            else:
                raise Rejection("bad_output", f"tool {tool!r} is not one of the run's tools "
                                f"({', '.join(contract.tools)})", text)
    else:
        tool = ""
    second = str(getattr(answer, "second_step", "") or "").strip()
    return ProgramSpec(kind, instructions, second, tool)


def answer_text(answer: Any) -> str:
    """A structured answer as the text a repair call is shown."""
    if isinstance(answer, pydantic.BaseModel):
        return answer.model_dump_json(indent=1)
    names = ("description", "kind", "main_step", "second_step", "tool", "profile")
    return "\n".join(f"{n}: {getattr(answer, n)}" for n in names if hasattr(answer, n))


def _literal(text: str) -> str:
    """LM text as an ASCII Python string literal: it can only ever be data in the generated source."""
    return ascii(clip(str(text), INSTRUCTION_CHARS))


def _fresh(name: str, taken: Sequence[str]) -> str:
    """`name`, or `name_2`, `name_3`, ... when a task field already uses it."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}_{n}"
    return candidate


def render(spec: ProgramSpec, contract: Contract, profile: str | None = None) -> str:
    """The specialist source for `spec` under `contract` (plain names only; LM text only inside literals)."""
    if spec.kind not in MODULE_KINDS:
        raise ValueError(f"unknown module kind {spec.kind!r}")
    ins, outs = list(contract.inputs), list(contract.outputs) or ["answer"]
    for name in ins + outs + ([spec.tool] if spec.tool else []):
        if not name.isidentifier() or name.startswith("_"):
            raise ValueError(f"{name!r} is not a plain field or tool name")
    taken = ins + outs + ([spec.tool] if spec.tool else [])
    args, call = ", ".join(ins), ", ".join(f"{i}={i}" for i in ins)
    ret = ", ".join(f"{o}=out.{o}" for o in outs)
    sig = f"{', '.join(ins)} -> {', '.join(outs)}"
    head = [f"PROFILE = {profile!r}", ""] if profile in ("fast", "deep") else []
    init: list[str]
    body: list[str]
    if spec.kind in ("predict", "chain_of_thought"):
        module = "dspy.Predict" if spec.kind == "predict" else "dspy.ChainOfThought"
        init = [f"self.solve = {module}({sig!r}, instructions={_literal(spec.instructions)})"]
        body = [f"out = self.solve({call})"]
    elif spec.kind == "retrieve_then_answer":
        query, passages = _fresh("query", taken), _fresh("passages", taken)
        arg = contract.query_arg(spec.tool)
        if not arg.isidentifier() or arg.startswith("_"):
            raise ValueError(f"{arg!r} is not a plain parameter name")
        request = " + ' ' + ".join(f"str({i})" for i in ins)
        init = [f"self.solve = dspy.ChainOfThought({(', '.join(ins + [passages]) + ' -> ' + ', '.join(outs))!r}, "
                f"instructions={_literal(spec.instructions)})"]
        body = [f"found = list({spec.tool}({arg}={request}))"]   # the request itself is the first query
        if spec.second_step:                                     # and a written query adds what it finds
            init.insert(0, f"self.ask = dspy.Predict({(', '.join(ins) + ' -> ' + query)!r}, "
                           f"instructions={_literal(spec.second_step)})")
            body += [f"for item in {spec.tool}({arg}=str(self.ask({call}).{query})):",
                     "    if item not in found:",
                     "        found.append(item)"]
        body += [f"out = self.solve({call}, {passages}=str(found))"]
    else:  # draft_and_check
        draft = _fresh("draft", taken)
        init = [f"self.draft = dspy.ChainOfThought({(', '.join(ins) + ' -> ' + draft)!r}, "
                f"instructions={_literal(spec.instructions)})",
                f"self.check = dspy.Predict({(', '.join(ins + [draft]) + ' -> ' + ', '.join(outs))!r}, "
                f"instructions={_literal(spec.second_step or DEFAULT_CHECK)})"]
        body = [f"first = self.draft({call}).{draft}",
                f"out = self.check({call}, {draft}=str(first))"]
    lines = head + ["class Specialist(dspy.Module):", "    def __init__(self):", "        super().__init__()"]
    lines += [f"        {line}" for line in init]
    lines += ["", f"    def forward(self, {args}):"] + [f"        {line}" for line in body]
    lines += [f"        return dspy.Prediction({ret})"]
    return "\n".join(lines) + "\n"


def choose_format(configured: str, code_rejections: int, after: int) -> str:
    """The format of one source-writing edit: `configured`, except that "auto" turns to "structured" once
    `code_rejections` (recent code-format rejections before the gate for the same target, repairs
    exhausted) reaches `after`."""
    if configured != "auto":
        return configured
    return "structured" if code_rejections >= after else "code"
