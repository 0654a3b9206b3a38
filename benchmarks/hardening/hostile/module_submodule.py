# escape: reach a submodule through an allowed module
# expect: rejected
import json

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=str(json.decoder))
