# escape: pty import
# expect: rejected
import pty

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        pty.spawn("/bin/sh")
        return dspy.Prediction(answer="x")
