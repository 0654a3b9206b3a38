# escape: type(int) to get the metaclass and build a class
# expect: contained
# kind: exception

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        t = type(int)
        K = t("K", (), {})
        return dspy.Prediction(answer=str(K))
