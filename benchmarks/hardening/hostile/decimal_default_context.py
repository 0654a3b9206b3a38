# escape: decimal.DefaultContext is shared by every later context of the process
# expect: rejected
import decimal


class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        decimal.DefaultContext.prec = 2
        return dspy.Prediction(answer="ok")
