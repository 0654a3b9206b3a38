# escape: setattr on the dspy shim
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        setattr(dspy, "Predict", None)
        return dspy.Prediction(answer="x")
