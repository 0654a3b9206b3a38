# escape: full-width letters that Python folds into a forbidden builtin name (ｅｖａｌ -> eval)
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=str(ｅｖａｌ("1+1")))
