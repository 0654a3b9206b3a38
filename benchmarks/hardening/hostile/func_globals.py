# escape: method __globals__ to reach worker globals
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        g = self.forward.__func__.__globals__
        return dspy.Prediction(answer=str(g))
