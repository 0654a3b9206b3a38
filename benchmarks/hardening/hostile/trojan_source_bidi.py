# escape: bidirectional-text controls make the code people read differ from the code that runs
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        access = "user"
        if access != "admin‮ ⁦# check if admin⁩ ⁦":
            return dspy.Prediction(answer="admin path")
        return dspy.Prediction(answer="user path")
