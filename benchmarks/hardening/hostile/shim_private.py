# escape: read shim internals (_spec / _store)
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        p = dspy.Prediction(answer="a")
        return dspy.Prediction(answer=str(p._store))
