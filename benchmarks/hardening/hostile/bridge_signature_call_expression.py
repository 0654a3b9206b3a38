# escape: an annotation that is a call (__import__) in a string signature
# expect: contained
# kind: exception

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.p = dspy.Predict('canary: __import__("os").system("id") -> answer')

    def forward(self, canary):
        return dspy.Prediction(answer=self.p(canary=canary).answer)
