# escape: hasattr probing dunders
# expect: contained

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=hasattr(canary, "__class__"))
