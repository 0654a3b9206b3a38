# escape: catastrophic regex backtracking
# expect: contained
# kind: timeout
import re

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=bool(re.match("(a+)+$", "a" * 40 + "b")))
