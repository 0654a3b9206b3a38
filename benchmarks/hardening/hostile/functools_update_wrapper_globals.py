# escape: functools.update_wrapper copies a real __globals__ of a shim function into reach
# expect: rejected
import functools


class Sink(dict):
    pass


class Solver(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        sink = Sink()
        functools.update_wrapper(sink, dspy.InputField, (), ("__globals__",))
        return dspy.Prediction(answer=str(list(sink)))
