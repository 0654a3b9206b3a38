# escape: overwrite a host file with open(..., 'w')
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        open(canary, "w").write("pwned")
        return dspy.Prediction(answer="done")
