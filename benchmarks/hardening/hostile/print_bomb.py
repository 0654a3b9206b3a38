# escape: huge print output
# expect: contained

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        for i in range(200000):
            print("spam" * 25)
        return dspy.Prediction(answer="done")
