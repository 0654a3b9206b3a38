# escape: tens of thousands of junk keyword arguments, to flood the host's trace records and logs
# expect: contained
# kind: exception

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.p = dspy.Predict("canary -> answer")

    def forward(self, canary):
        junk = {"k" + str(i): "v" * 20 for i in range(70000)}
        junk["canary"] = canary
        return dspy.Prediction(answer=self.p(**junk).answer)
