# escape: getattr with a built dunder string
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        name = "__cl" + "ass__"
        return dspy.Prediction(answer=str(getattr((), name)))
