"""`OpenEndedOptimizer`: a second optimizer under the same contract as AdaptiveGEPA (reference 003).

    optimizer = OpenEndedOptimizer(metric, optimizer_lm=dspy.LM("openai/gpt-5.5"), max_metric_calls=2000,
                                   log_dir="runs/oeo")
    routed = optimizer.compile(program, trainset=train, valset=val)     # a RoutedProgram, same Library format

Where AdaptiveGEPA prescribes the improvement procedure (select a parent, reflect, gate, validate, merge),
OEO lets the optimizer LM compose it turn by turn through a small action interface (inspect, run_train,
evaluate, revise, select, stop; see `contract` and `runner`), while the contract -- objective, permitted
operations, budget by kind, the data boundary, the sealed test split -- is enforced by the runner. Scored
calls go through the same Evaluator and sandbox as AdaptiveGEPA's and are counted by the same kinds.

With `log_dir`, the run is checkpointed after every turn (rerun to resume: same checkpoints, evidence and
budget; the calls of a turn a kill interrupted are counted as lost) and leaves run.json (every turn with its
action, arguments, observation size, cost and commit; every checkpoint), report.md and learning_curve.png.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import dspy
from dspy.teleprompt.teleprompt import Teleprompter

from dspy_adaptive import checks
from dspy_adaptive.data import InputError, input_keys
from dspy_adaptive.optimizers.assembly import BudgetLimits, RunSpec, assemble, describe_lm, spec_identity
from dspy_adaptive.optimizers.inputs import compile_rows
from dspy_adaptive.optimizers.oeo.contract import Contract
from dspy_adaptive.optimizers.oeo.runner import Runner, Turn
from dspy_adaptive.program.library import Library
from dspy_adaptive.program.routed import RoutedProgram
from dspy_adaptive.program.settings import ProgramSettings
from dspy_adaptive.record.oeo_record import action_counts, write_record
from dspy_adaptive.reflection.propose import program_contract
from dspy_adaptive.sandbox.settings import SandboxSettings
from dspy_adaptive.search.execution import ExecutionSettings


class OpenEndedOptimizer(Teleprompter):
    """Open-ended optimization of a routed program library under an enforced contract.

    Args:
        metric: dspy.GEPA's feedback metric, as for AdaptiveGEPA.
        optimizer_lm: the LM that composes the improvement process (use a capable one: reference 003 found
            weaker optimizers cannot act through an open interface).
        max_metric_calls: the budget in scored calls (one program run on one example plus its metric).
        max_turns: at most this many optimizer turns (each one optimizer-LM call).
        max_specialists: K, the number of specialist slots.
        fast_lm: the fast execution profile (router and fast specialists; default: the configured LM).
        deep_lm: the deep profile (fallback and deep specialists; default: the configured LM).
        tools: functions specialists may call by name.
        num_threads: rows evaluated in parallel.
        failure_score: the score of a failed rollout or metric.
        log_dir: where the run is checkpointed and recorded (rerun to resume).
        seed: seeds the random training samples.
        max_cost_usd: stop once the LM cost (optimizer included) reaches it.
        sandbox: limits for specialist programs (`SandboxSettings`).
    """

    def __init__(self, metric: Callable, *, optimizer_lm: Any, max_metric_calls: int, max_turns: int = 40,
                 max_specialists: int = 5, fast_lm: Any = None, deep_lm: Any = None,
                 tools: Mapping[str, Callable] | Sequence[Callable] | None = None, num_threads: int | None = None,
                 failure_score: float = 0.0, log_dir: str | None = None, seed: int = 0,
                 max_cost_usd: float | None = None, sandbox: SandboxSettings | None = None):
        super().__init__()
        if not callable(metric):
            raise InputError(f"metric must be callable, got {type(metric).__name__}")
        if optimizer_lm is None:
            raise InputError("optimizer_lm is required: the LM that composes the improvement process")
        if isinstance(max_metric_calls, bool) or not isinstance(max_metric_calls, int) or max_metric_calls < 1:
            raise InputError(f"max_metric_calls must be a positive integer, got {max_metric_calls!r}")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise InputError(f"max_turns must be a positive integer, got {max_turns!r}")
        checks.positive_number("max_cost_usd", max_cost_usd, optional=True, unit="US dollars")
        self.metric, self.optimizer_lm = metric, optimizer_lm
        self.max_metric_calls, self.max_turns, self.max_specialists = max_metric_calls, max_turns, max_specialists
        self.program = ProgramSettings(max_specialists, fast_lm, deep_lm, tools)
        self.num_threads, self.failure_score, self.log_dir, self.seed = num_threads, failure_score, log_dir, seed
        self.max_cost_usd = max_cost_usd
        self.sandbox_settings = sandbox or SandboxSettings()
        self.record: dict[str, Any] | None = None

    def compile(self, student: dspy.Module, *, trainset: Sequence[dspy.Example], teacher: Any = None,
                valset: Sequence[dspy.Example] | None = None, **kwargs: Any) -> RoutedProgram:
        """Run the optimizer LM under the contract; returns the selected checkpoint as a RoutedProgram."""
        train, val = compile_rows("OpenEndedOptimizer", student, trainset, teacher, valset, kwargs)
        spec = RunSpec(student, self.metric, input_keys(train), self.program, self.sandbox_settings,
                       ExecutionSettings(self.num_threads, route_memo=False), self.failure_score)
        identity = {**spec_identity(spec, train, val), "optimizer": "OpenEndedOptimizer", "seed": self.seed,
                    "max_metric_calls": self.max_metric_calls,
                    "optimizer_lm": describe_lm(self.optimizer_lm), "max_turns": self.max_turns}
        run = assemble(spec, limits=BudgetLimits(self.max_metric_calls, self.max_cost_usd), log_dir=self.log_dir,
                       identity=identity, what="OEO run", lms={"optimizer_lm": self.optimizer_lm})
        with run.holding_log_dir():                      # log_dir is this run's until its record is written
            contract = Contract(Library.empty(self.program.max_specialists), train, val, run.evaluator, seed=self.seed)
            outputs = self._output_names(student)
            task = (f"Requests have the input field(s) {', '.join(spec.input_names)}; the program answers "
                    f"{', '.join(outputs)}. There are {len(train)} training rows (their traces and feedback are yours "
                    f"to run) and {len(val)} validation rows (scores only). Specialist programs follow this contract:\n"
                    + program_contract(spec.input_names, outputs, tuple(self.program.tools)))
            lost = [0]

            def on_turn(runner: Runner, turn: Turn) -> None:
                lost[0] += run.evaluator.replay.expire(upto=turn.index)    # cut-off calls no redone turn asked for
                if run.store is not None:
                    run.store.commit(self._state(runner, lost[0]))

            runner = Runner(contract, self.optimizer_lm, task, max_turns=self.max_turns, meter=run.meter,
                            max_cost_usd=self.max_cost_usd, on_turn=on_turn)

            def load(state: dict[str, Any]) -> None:
                contract.load_state_dict(state["contract"])
                runner.load_state_dict(state["runner"])
                lost[0] = int(state.get("lost_calls", 0))

            run.restore(load)
            try:
                with run, run.meter.active():
                    runner.run()
            finally:
                lost[0] += run.evaluator.replay.expire()
                if run.store is not None:
                    run.store.commit(self._state(runner, lost[0]))
            best = contract.output()
            routed = run.returned(best.library)
            self.record = self._record(runner, best.index, lost[0])
            routed.oeo_record = self.record
            if self.log_dir:
                write_record(self.record, Path(self.log_dir))
            return routed

    # -- helpers -------------------------------------------------------------------------------------------
    @staticmethod
    def _output_names(student: dspy.Module) -> tuple[str, ...]:
        names: list[str] = []
        for _, predictor in student.named_predictors():
            names = list(predictor.signature.output_fields)
        return tuple(names) or ("answer",)

    @staticmethod
    def _state(runner: Runner, lost_calls: int) -> dict[str, Any]:
        return {"contract": runner.contract.state_dict(), "runner": runner.state_dict(),
                "committed": [t.index for t in runner.turns], "lost_calls": lost_calls}

    def _record(self, runner: Runner, selected: int, lost_calls: int) -> dict[str, Any]:
        c = runner.contract
        report = c.budget.report()
        return {"optimizer": "OpenEndedOptimizer", "selected": selected, "stop_reason": runner.stop_reason,
                "budget": {"max": report.max_calls, "spent": report.spent, "by_kind": report.by_kind,
                           "lost_to_interruptions": lost_calls},
                "checkpoints": [cp.to_dict() | {"val_mean": cp.val_mean} for cp in c.checkpoints],
                "turns": [t.to_dict() for t in runner.turns], "usage": runner.meter.snapshot(),
                "operational_failures": sum(1 for t in runner.turns if not t.ok),
                "actions": action_counts([t.tool for t in runner.turns], [t.ok for t in runner.turns])}


__all__ = ["OpenEndedOptimizer"]
