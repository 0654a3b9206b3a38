"""Scripts over the dspy_adaptive library for the paper's benchmark mixture (Adaptive-GEPA §4, Appendices B–D).

Run from a checkout (this folder is not installed with the package):

    python -m benchmarks.run ...       data -> search -> test -> Tables 2, 4, 5 (any method, any LMs)
    python -m benchmarks.perf          speed against dspy.GEPA on a scripted task
    python -m benchmarks.faults        hostile code, LM faults, kill -9 and resume, bad inputs
    python -m benchmarks.replay RUN    re-apply index / mutual-best / Hungarian merges to a run's merge events

Modules: `data` (loaders of the paper's data and splits), `baselines` (GEPA-FPA, per-family FPA, MoP),
`run` (the runner), `tables` (the paper's tables). The reusable pieces — the families' metrics with
feedback, the IFEval/LiveBench checkers, retrieval, the family-balanced sampler and the seed program —
live in `dspy_adaptive.tasks`; the scripted LMs in `dspy_adaptive.testing`.
"""
