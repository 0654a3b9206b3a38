# escape: subprocess import
# expect: rejected
import subprocess

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=subprocess.check_output(["id"]))
