# escape: a class-based signature whose annotation is a string naming host state
# expect: contained
# kind: exception

class Leak(dspy.Signature):
    """Answer."""
    canary: "self.deep_lm.kwargs" = dspy.InputField()
    answer: str = dspy.OutputField()


class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.p = dspy.Predict(Leak)

    def forward(self, canary):
        return dspy.Prediction(answer=self.p(canary=canary).answer)
