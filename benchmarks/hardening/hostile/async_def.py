# escape: async function / coroutine frames
# expect: rejected
async def helper():
    return 1

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer="x")
