# escape: allocate a huge string
# expect: contained
# kind: memory

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        x = "a" * (4 * 1024 ** 3)
        return dspy.Prediction(answer=len(x))
