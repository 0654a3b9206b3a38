# escape: statistics.sys is the sys module (a module attribute of an allowed module)
# expect: rejected
import statistics


class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=str(statistics.sys.modules["os"].environ))
