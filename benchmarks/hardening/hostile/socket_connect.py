# escape: network via socket
# expect: rejected
import socket

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        s = socket.socket()
        s.connect(("example.com", 80))
        return dspy.Prediction(answer="x")
