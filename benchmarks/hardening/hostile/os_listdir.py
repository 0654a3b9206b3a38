# escape: directory listing via os
# expect: rejected
import os

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=os.listdir("/"))
