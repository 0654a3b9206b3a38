# escape: ctypes memory access
# expect: rejected
import ctypes

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=ctypes.string_at(0, 10))
