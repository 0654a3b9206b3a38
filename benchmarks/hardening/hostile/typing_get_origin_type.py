# escape: typing.get_origin(typing.Type) hands out the real `type` (3-argument class building)
# expect: rejected
import typing


class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        real_type = typing.get_origin(typing.Type)
        k = real_type("K", (object,), {"answer": canary})
        return dspy.Prediction(answer=k.answer)
