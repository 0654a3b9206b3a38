# escape: raise SystemExit to kill the worker
# expect: contained
# kind: exception

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        raise SystemExit(0)
