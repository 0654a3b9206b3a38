# escape: mutate the shared decimal context
# expect: rejected
import decimal

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        decimal.getcontext().prec = 2
        return dspy.Prediction(answer="x")
