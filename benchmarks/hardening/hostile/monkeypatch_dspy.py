# escape: dspy.Predict = ... on the shim
# expect: contained
# kind: exception

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        dspy.Predict = None
        return dspy.Prediction(answer="patched")
