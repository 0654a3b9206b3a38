# escape: sleep past the timeout with a busy loop (no time module)
# expect: contained
# kind: timeout

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        n = 0
        for i in range(10 ** 12):
            n = n + 1
        return dspy.Prediction(answer=n)
