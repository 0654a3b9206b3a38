# escape: lambda __code__ to rebuild functions
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        c = (lambda: 0).__code__
        return dspy.Prediction(answer=str(c))
