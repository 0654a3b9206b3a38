# escape: grow a list until memory runs out
# expect: contained
# kind: memory

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        chunks = []
        while True:
            chunks.append("x" * (8 * 1024 ** 2) + str(len(chunks)))
