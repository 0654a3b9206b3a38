# escape: import a submodule via from-import
# expect: rejected
from collections import abc

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=str(abc))
