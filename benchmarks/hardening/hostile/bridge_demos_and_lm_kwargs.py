# escape: hand the host predictor demos, a signature and an lm of the specialist's choosing
# expect: contained
# kind: exception

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.p = dspy.Predict("canary -> answer")

    def forward(self, canary):
        out = self.p(canary=canary, demos=[{"canary": "x", "answer": "y"}], signature="a -> b", lm="openai/gpt-4o")
        return dspy.Prediction(answer=out.answer)
