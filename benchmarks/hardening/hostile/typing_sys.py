# escape: typing.sys to reach sys
# expect: rejected
import typing

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=str(typing.sys.modules))
