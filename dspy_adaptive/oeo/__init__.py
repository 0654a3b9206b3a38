"""Open-ended optimization under the same contract (OEO, reference 003): a second optimizer whose optimizer LM
composes the improvement process turn by turn, while the runner enforces the contract."""

from dspy_adaptive.oeo.contract import Checkpoint, Contract, ContractViolation
from dspy_adaptive.oeo.optimizer import OpenEndedOptimizer
from dspy_adaptive.oeo.runner import Runner, Turn

__all__ = ["Checkpoint", "Contract", "ContractViolation", "OpenEndedOptimizer", "Runner", "Turn"]
