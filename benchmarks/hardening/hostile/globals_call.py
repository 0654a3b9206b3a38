# escape: globals() to tamper with guards
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        globals()["x"] = 1
        return dspy.Prediction(answer="x")
