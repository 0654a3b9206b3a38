# escape: ().__class__.__base__.__subclasses__()
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        subs = ().__class__.__base__.__subclasses__()
        return dspy.Prediction(answer=[c.__name__ for c in subs])
