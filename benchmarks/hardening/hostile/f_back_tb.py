# escape: tb_frame without dunders
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        try:
            1 / 0
        except Exception as e:
            tb = e.with_traceback(None)
            fr = tb.tb_frame
        return dspy.Prediction(answer=str(fr))
