# escape: functools.singledispatch registration evaluates annotations
# expect: rejected
import functools

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        g = functools.singledispatch(lambda x: x)
        return dspy.Prediction(answer="x")
