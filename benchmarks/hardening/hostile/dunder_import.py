# escape: __import__('os')
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=__import__("os").environ["OPENAI_API_KEY"])
