# escape: network via http.client
# expect: rejected
from http import client

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=client.HTTPConnection("example.com"))
