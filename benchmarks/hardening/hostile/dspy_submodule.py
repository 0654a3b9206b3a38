# escape: import a real dspy submodule
# expect: rejected
import dspy.primitives

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer="x")
