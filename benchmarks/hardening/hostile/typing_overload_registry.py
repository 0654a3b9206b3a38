# escape: typing.overload's process-wide registry carries data from one request to the next
# expect: rejected
from typing import overload, get_overloads


class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        @overload
        def remember(x: int) -> int: ...
        return dspy.Prediction(answer=str(len(get_overloads(remember))))
