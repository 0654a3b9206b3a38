# escape: a signature with 8,000 fields (host CPU for building the pydantic model)
# expect: contained
# kind: exception

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        names = ", ".join("f" + str(i) for i in range(8000))
        self.p = dspy.Predict("canary -> " + names)

    def forward(self, canary):
        return dspy.Prediction(answer=str(self.p(canary=canary)))
