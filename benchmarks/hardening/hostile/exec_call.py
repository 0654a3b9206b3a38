# escape: exec
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        exec("import os")
        return dspy.Prediction(answer="x")
