# escape: read the host's environ via /proc/<ppid>/environ
# expect: rejected
import os

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=open("/proc/" + str(os.getppid()) + "/environ").read())
