# escape: infinite loop
# expect: contained
# kind: timeout

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        while True:
            pass
