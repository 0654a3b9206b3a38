# escape: write to the inputs expecting host effect
# expect: contained

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, **kw):
        kw["canary"] = "pwned"
        kw.clear()
        return dspy.Prediction(answer="ok")
