# escape: import builtins to get open
# expect: rejected
import builtins

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=builtins.open("/etc/passwd").read())
