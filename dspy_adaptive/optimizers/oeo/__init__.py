"""Open-ended optimization under the same contract (OEO, reference 003): a second optimizer whose optimizer LM
composes the improvement process turn by turn, while the runner enforces the contract."""

from dspy_adaptive.optimizers.oeo.contract import Checkpoint, Contract, ContractViolation
from dspy_adaptive.optimizers.oeo.optimizer import OpenEndedOptimizer
from dspy_adaptive.optimizers.oeo.runner import Runner, Turn

__all__ = ["Checkpoint", "Contract", "ContractViolation", "OpenEndedOptimizer", "Runner", "Turn"]
