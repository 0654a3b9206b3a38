# escape: importlib.import_module('os')
# expect: rejected
import importlib

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=importlib.import_module("os").environ)
