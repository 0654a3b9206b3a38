# escape: a predictor whose attribute path is megabytes long (names of any size in logs and records); the shim clips it, the host caps it
# expect: contained

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.table = {"k" * 2000000: dspy.Predict("canary -> answer")}

    def forward(self, canary):
        for k in self.table:
            return dspy.Prediction(answer=self.table[k](canary=canary).answer)
