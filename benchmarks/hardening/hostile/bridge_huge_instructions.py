# escape: 100 predictors with 0.9 MB instructions each (host memory kept in predictor caches)
# expect: contained
# kind: exception

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.ps = [dspy.Predict("canary -> answer", instructions=("x" * 900000) + str(i)) for i in range(100)]

    def forward(self, canary):
        out = []
        for p in self.ps:
            out.append(p(canary=canary).answer)
        return dspy.Prediction(answer=out[0])
