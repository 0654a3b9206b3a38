# escape: a bare type name that only exists as a local variable in a host frame (example, lm, self)
# expect: contained
# kind: exception

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.p = dspy.Predict("canary: example -> answer: lm")

    def forward(self, canary):
        return dspy.Prediction(answer=self.p(canary=canary).answer)
