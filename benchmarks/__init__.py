"""The paper's benchmark mixture (Adaptive-GEPA §4.1, Appendices B–D) for `dspy_adaptive`.

Four task families — HotpotQA, AIME, PUPA and LiveBench-IF — share ONE input schema so one
program can serve the whole mixture:

* input  `request: str`  — the task exactly as a user would send it (HotpotQA question, AIME
  problem, PUPA `user_query`, LiveBench-IF turn text). It is the only input field.
* output `response: str` — the final answer/text for the user. PUPA programs may also output
  `external_request: str` — the (redacted) request they sent to the untrusted external model.

Everything else on an example (`id`, `family`, `subtask`, gold answers, ...) is hidden label data
for metrics and the minibatch sampler.

Modules: `data` (loaders, splits), `metrics` (feedback metrics, `MixtureMetric`, AIME pass@1),
`sampler` (family-balanced minibatches), `retrieval` (search tool), `programs` (seed P0).
`benchmarks.ifeval` holds the IFEval/LiveBench-IF instruction checkers.
"""

INPUT_FIELD = "request"
OUTPUT_FIELD = "response"
EXTERNAL_REQUEST_FIELD = "external_request"
FAMILIES = ("hotpotqa", "aime", "pupa", "livebench_if")

__all__ = ["EXTERNAL_REQUEST_FIELD", "FAMILIES", "INPUT_FIELD", "OUTPUT_FIELD"]
