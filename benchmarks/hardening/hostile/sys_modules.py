# escape: sys.modules to reach os
# expect: rejected
import sys

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=str(sys.modules["os"].environ))
