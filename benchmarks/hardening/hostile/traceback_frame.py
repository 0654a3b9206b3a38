# escape: exception __traceback__.tb_frame.f_back
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        try:
            1 / 0
        except Exception as e:
            fr = e.__traceback__.tb_frame.f_back
        return dspy.Prediction(answer=str(fr.f_globals))
