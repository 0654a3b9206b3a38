# escape: compile
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        c = compile("1", "x", "eval")
        return dspy.Prediction(answer=str(c))
