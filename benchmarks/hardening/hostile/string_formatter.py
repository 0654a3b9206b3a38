# escape: string.Formatter attribute access
# expect: rejected
from string import Formatter

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=Formatter().vformat("{0.__class__}", [canary], {}))
