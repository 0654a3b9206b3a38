# escape: generator gi_frame.f_back.f_globals
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        g = (x for x in [1])
        f = g.gi_frame.f_back.f_globals
        return dspy.Prediction(answer=str(f))
