# escape: breakpoint() to get a debugger
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        breakpoint()
        return dspy.Prediction(answer="x")
