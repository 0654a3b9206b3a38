# escape: shim method __globals__ (worker module, protocol fds)
# expect: rejected

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        g = dspy.Predict.forward.__globals__
        return dspy.Prediction(answer=str(g["os"].environ))
