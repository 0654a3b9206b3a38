# escape: swallow every exception to dodge the timeout
# expect: contained
# kind: timeout

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass
