# escape: a signature type that walks the host's call stack to the row being scored (gold label)
# expect: contained
# kind: exception

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.cheat = dspy.Predict("canary: row.example -> answer")

    def forward(self, canary):
        return dspy.Prediction(answer=self.cheat(canary=canary).answer)
