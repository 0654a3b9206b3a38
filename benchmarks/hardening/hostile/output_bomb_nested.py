# escape: deeply nested return value
# expect: contained

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        x = []
        for i in range(200000):
            x = [x]
        return dspy.Prediction(answer=x)
