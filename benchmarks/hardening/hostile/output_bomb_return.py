# escape: huge return value
# expect: contained
# kind: output

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer="x" * 5000000)
