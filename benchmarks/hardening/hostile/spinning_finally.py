# escape: a finally block that spins after forward "returns", to blame the next request
# expect: contained
# kind: timeout

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        try:
            return dspy.Prediction(answer="quick")
        finally:
            n = 0
            while True:
                n += 1
