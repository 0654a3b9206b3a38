# escape: typing.get_type_hints evaluates string annotations unrestricted
# expect: rejected
import typing

def f(x: "().__class__.__base__.__subclasses__()"):
    return x

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=str(typing.get_type_hints(f)))
