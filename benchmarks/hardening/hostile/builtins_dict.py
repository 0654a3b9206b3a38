# escape: __builtins__ lookup
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=__builtins__["open"]("/etc/passwd").read())
