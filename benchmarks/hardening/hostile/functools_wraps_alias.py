# escape: functools.wraps reached through an alias, to copy attributes by name
# expect: rejected
from functools import wraps as copy_attrs


class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        def f():
            return 1
        g = copy_attrs(dspy.Prediction, ("__globals__",), ())(f)
        return dspy.Prediction(answer=str(g))
