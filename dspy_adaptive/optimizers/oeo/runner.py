"""The OEO turn loop: the optimizer LM composes the improvement process; the runner enforces the contract.

Each turn the optimizer LM reads the task, the action interface, the remaining budget and the record of
its earlier turns, and answers one action (tool name and JSON arguments) -- the ReAct pattern, with DSPy's
own `dspy.Tool` describing each action and validating its arguments. It is written as a loop of its own
rather than `dspy.ReAct` because the contract needs what ReAct does not give: an unknown tool or a bad
argument is recorded as an operational failure and the run goes on (ReAct ends the trajectory on an unknown
tool), every turn is recorded with its cost, and a killed run resumes from its last recorded turn (ReAct's
trajectory lives in memory).

A run ends when the optimizer stops, when the budget cannot pay for another scored call and the optimizer
has stopped or selected, after `max_turns`, or on `max_cost_usd` (the optimizer LM's cost counts too).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

import dspy

from dspy_adaptive.lm.usage import UsageMeter, role
from dspy_adaptive.optimizers.oeo.contract import Contract, ContractViolation
from dspy_adaptive.schema import clip

OBSERVATION_CHARS = 12000     # what one observation shows the optimizer


@dataclass(frozen=True)
class Turn:
    """One action and its outcome (the run record's unit)."""

    index: int
    tool: str
    args: dict[str, Any]
    ok: bool
    error: str | None
    observation_chars: int
    commit: int | None            # the checkpoint a revision committed
    spent_after: int              # scored calls spent after this turn
    usage: dict[str, dict[str, float]] = field(default_factory=dict)   # the optimizer LM's tokens and cost
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        outcome = "ok" if self.ok else f"REFUSED: {self.error}"
        commit = f", committed #{self.commit}" if self.commit is not None else ""
        return f"turn {self.index}: {self.tool}({clip(json.dumps(self.args, default=str), 300)}) -> {outcome}{commit}"


class OptimizerTurn(dspy.Signature):
    """You optimize a routed program library for the task below, under a fixed contract. Each turn, choose one
    action from the interface and give its arguments as a JSON object. Gather evidence by running the current
    library on training rows, revise the library (router instruction, specialist descriptions, programs,
    profiles, active flags; every revision is committed as a checkpoint), evaluate checkpoints on validation,
    select the checkpoint to return, and stop when done or when the budget is spent. Validation labels and test
    data are never available; refused actions still cost a turn."""

    task: str = dspy.InputField(desc="what the program serves and how specialist programs are written")
    interface: str = dspy.InputField(desc="the actions: name, arguments and what they do")
    state: str = dspy.InputField(desc="budget, checkpoints, selection")
    history: str = dspy.InputField(desc="your earlier turns and their outcomes, oldest first")
    last_observation: str = dspy.InputField(desc="what your last action returned")
    next_thought: str = dspy.OutputField()
    next_tool_name: str = dspy.OutputField(desc="one action name from the interface")
    next_tool_args: dict[str, Any] = dspy.OutputField(desc="its arguments as a JSON object")


def make_tools(contract: Contract) -> dict[str, dspy.Tool]:
    """The interface as DSPy tools (name, description, argument schema, argument validation)."""

    def inspect() -> str:
        """Show the latest library, every checkpoint with its validation mean, the evidence and the budget."""
        return contract.inspect()

    def run_train(checkpoint: int | None = None, row_ids: list[str] | None = None, sample: int | None = None) -> str:
        """Run a checkpoint (default: the latest) on training rows named by id, or on `sample` random ones
        (default 4); returns each row's trace, output, score and feedback. Costs one scored call per row."""
        return contract.run_train(checkpoint, row_ids, sample)

    def evaluate(checkpoint: int | None = None) -> str:
        """Score a checkpoint (default: the latest) on the whole validation set; returns its mean only.
        Costs one scored call per validation row."""
        return contract.evaluate(checkpoint)

    def revise(router: str | None = None, slots: dict[str, dict[str, Any]] | None = None,
               base: int | None = None) -> str:
        """Commit a new checkpoint from `base` (default: the latest): a new router instruction and/or slot
        changes {slot number: {"description", "program", "profile": "fast"|"deep", "active": false}}."""
        return contract.revise(router, slots, base)

    def select(checkpoint: int) -> str:
        """Choose the checkpoint the run returns."""
        return contract.select(checkpoint)

    def stop() -> str:
        """End the run."""
        return contract.stop()

    return {fn.__name__: dspy.Tool(fn) for fn in (inspect, run_train, evaluate, revise, select, stop)}


def interface_text(tools: Mapping[str, dspy.Tool]) -> str:
    return "\n".join(f"- {t.name}: {t.desc} Arguments: {json.dumps(t.args)}" for t in tools.values())


class Runner:
    """Runs turns until the run ends (see the module docstring); `on_turn` is called after every turn."""

    def __init__(self, contract: Contract, optimizer_lm: Any, task: str, *, max_turns: int = 40,
                 meter: UsageMeter | None = None, max_cost_usd: float | None = None,
                 on_turn: Callable[["Runner", Turn], None] | None = None):
        self.contract, self.lm, self.task = contract, optimizer_lm, task
        self.max_turns, self.max_cost_usd = max_turns, max_cost_usd
        self.meter = meter or UsageMeter()
        self.tools = make_tools(contract)
        self.turns: list[Turn] = []
        self.last_observation = "none yet: start by inspecting the library"
        self.on_turn = on_turn
        self.predict = dspy.Predict(OptimizerTurn)
        self.stop_reason = ""

    def done(self) -> bool:
        c = self.contract
        if c.stopped:
            self.stop_reason = "the optimizer stopped"
        elif len(self.turns) >= self.max_turns:
            self.stop_reason = f"max_turns ({self.max_turns}) reached"
        elif self.max_cost_usd is not None and self.meter.total_cost() >= self.max_cost_usd:
            self.stop_reason = f"max_cost_usd ({self.max_cost_usd}) reached"
        elif c.remaining == 0 and c.selected is not None:
            self.stop_reason = "budget exhausted (a checkpoint is selected)"
        else:
            return False
        return True

    def run(self) -> None:
        while not self.done():
            self.turns.append(self.step())
            if self.on_turn is not None:
                self.on_turn(self, self.turns[-1])

    def state_text(self) -> str:
        c = self.contract
        return (f"turn {len(self.turns) + 1} of at most {self.max_turns}; remaining budget {c.remaining} of "
                f"{c.budget.max_calls} scored calls; checkpoints: "
                + ", ".join(f"#{k.index}" + (f" (val {k.val_mean:.3f})" if k.val_mean is not None else "")
                            for k in c.checkpoints)
                + f"; selected: {c.selected if c.selected is not None else 'none'}")

    def step(self) -> Turn:
        index, t0, commits = len(self.turns) + 1, time.perf_counter(), len(self.contract.checkpoints)
        self.contract.begin_turn(index)
        with self.meter.child() as sub:
            try:
                with dspy.context(lm=self.lm, trace=None), role("reflection"):
                    pred = self.predict(task=self.task, interface=interface_text(self.tools),
                                        state=self.state_text(),
                                        history="\n".join(t.line() for t in self.turns[-30:]) or "none",
                                        last_observation=clip(self.last_observation, OBSERVATION_CHARS))
                name, args = str(pred.next_tool_name or "").strip(), pred.next_tool_args
            except Exception as e:  # noqa: BLE001 - an unusable answer is an operational failure of this turn
                name, args = "(no action)", {}
                error: str | None = f"the answer could not be read: {type(e).__name__}: {clip(str(e), 300)}"
            else:
                error = None
        args = dict(args) if isinstance(args, Mapping) else {"_raw": clip(repr(args), 300)}
        observation = ""
        if error is None:
            tool = self.tools.get(name)
            try:
                if tool is None:
                    raise ContractViolation(f"unknown action {name!r} (the interface: {', '.join(self.tools)})")
                if not isinstance(pred.next_tool_args, Mapping):
                    raise ContractViolation("the arguments must be a JSON object")
                observation = str(tool(**args))
            except ContractViolation as e:
                error = str(e)
            except Exception as e:  # noqa: BLE001 - bad arguments (dspy.Tool's validation) are refusals too
                error = f"{type(e).__name__}: {clip(str(e), 300)}"
        self.last_observation = observation if error is None else f"REFUSED: {error}"
        commit = len(self.contract.checkpoints) - 1 if len(self.contract.checkpoints) > commits else None
        return Turn(index, name, args, error is None, error, len(observation), commit,
                    self.contract.budget.spent, sub.snapshot(), round(time.perf_counter() - t0, 3))

    # -- resume ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"turns": [t.to_dict() for t in self.turns], "last_observation": clip(self.last_observation, 20000),
                "usage": self.meter.snapshot(), "stop_reason": self.stop_reason}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.turns = [Turn(**t) for t in state.get("turns", [])]
        self.last_observation = state.get("last_observation") or self.last_observation
        self.meter.restore(state.get("usage", {}))
