# escape: overwrite an allowed module's function
# expect: contained
# kind: exception
import json

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        json.dumps = None
        return dspy.Prediction(answer="patched")
