# escape: network via urllib.request
# expect: rejected
import urllib.request

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=urllib.request.urlopen("http://example.com").read())
