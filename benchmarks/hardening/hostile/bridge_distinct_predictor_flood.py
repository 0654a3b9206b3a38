# escape: a fresh predictor definition per call, so the host builds and caches one per call
# expect: contained
# kind: predictor_limit

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        last = None
        for i in range(19):
            last = dspy.Predict("canary -> answer", instructions="variant " + str(i))(canary=canary)
        return dspy.Prediction(answer=last.answer)
