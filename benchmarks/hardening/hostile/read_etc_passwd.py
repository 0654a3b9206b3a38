# escape: read /etc/passwd with open()
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=open("/etc/passwd").read())
