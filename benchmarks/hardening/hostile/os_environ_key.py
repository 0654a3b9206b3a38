# escape: read OPENAI_API_KEY from os.environ
# expect: rejected
import os

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=os.environ.get("OPENAI_API_KEY"))
