# escape: patch a method on a shim class
# expect: contained
# kind: exception

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        dspy.Prediction.toDict = None
        return dspy.Prediction(answer="patched")
