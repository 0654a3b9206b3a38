# escape: fork via os.fork
# expect: rejected
import os

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        pid = os.fork()
        return dspy.Prediction(answer=pid)
