# escape: an input nested 10,000 levels deep (recursion in the host's JSON handling)
# expect: contained
# kind: exception

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.p = dspy.Predict("canary -> answer")

    def forward(self, canary):
        deep = canary
        for i in range(10000):
            deep = [deep]
        return dspy.Prediction(answer=self.p(canary=deep).answer)
