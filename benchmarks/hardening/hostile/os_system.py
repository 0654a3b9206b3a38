# escape: run a shell via os.system
# expect: rejected
import os

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        os.system("touch /tmp/pwned")
        return dspy.Prediction(answer="x")
