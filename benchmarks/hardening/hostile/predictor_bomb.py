# escape: unbounded predictor calls
# expect: contained
# kind: predictor_limit

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        p = dspy.Predict("q -> a")
        for i in range(100000):
            p(q=str(i))
        return dspy.Prediction(answer="x")
