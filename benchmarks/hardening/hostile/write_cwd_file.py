# escape: create a file in the cwd
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        f = open("pwned.txt", "w")
        f.write("x")
        return dspy.Prediction(answer="done")
