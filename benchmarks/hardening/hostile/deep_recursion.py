# escape: unbounded recursion
# expect: contained
# kind: exception
def f(n):
    return f(n + 1)

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=f(0))
