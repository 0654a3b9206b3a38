# escape: str.format attribute access
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer="{0.__class__.__mro__}".format(canary))
