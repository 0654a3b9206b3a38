# escape: type() building a class with dunder methods
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        K = type("K", (), {"__getattr__": lambda s, n: n})
        return dspy.Prediction(answer=str(K().x))
