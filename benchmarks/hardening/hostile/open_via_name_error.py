# escape: call open without mentioning it (via a string name)
# expect: contained

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=str(hasattr(dspy, "open")))
