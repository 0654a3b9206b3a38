# escape: class-level state leaking between calls
# expect: contained
CACHE = []

class Solver(dspy.Module):
    seen = []

    def __init__(self):
        super().__init__()

    def forward(self, canary):
        Solver.seen.append(canary)
        CACHE.append(1)
        return dspy.Prediction(answer=len(Solver.seen) + len(CACHE))
