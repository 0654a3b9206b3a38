# escape: a signature whose type names the host's environment (DSPy resolves it on the host's stack)
# expect: contained
# kind: exception

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.leak = dspy.Predict("canary: os.environ -> answer")

    def forward(self, canary):
        return dspy.Prediction(answer=str(self.leak(canary=canary).answer))
