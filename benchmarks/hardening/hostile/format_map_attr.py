# escape: format_map attribute access
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer="{x.__class__}".format_map({"x": canary}))
