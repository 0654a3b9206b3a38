# escape: decorator that runs code at definition time
# expect: rejected
def deco(f):
    print("ran at import")
    return f

@deco
def helper():
    return 1

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=helper())
