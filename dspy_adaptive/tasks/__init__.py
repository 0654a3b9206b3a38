"""Reusable task pieces for mixed-request programs: the four families of the Adaptive-GEPA paper.

Import them for your own programs and optimizer runs; the demo (`dspy_adaptive.demo`) and the
benchmark scripts (`benchmarks/` in a checkout) are built from them.

One shared schema lets one program serve the whole mixture:

* input  `request: str`  — the task exactly as a user would send it (a question, a math problem, a
  privacy-sensitive request, a writing task with constraints). It is the only input field.
* output `response: str` — the final answer or text for the user. Programs that delegate to an
  untrusted external model also output `external_request: str`, the (redacted) text they sent.

Everything else on an example (`id`, `family`, `subtask`, gold answers, ...) is label data for the
metrics and the minibatch sampler; it never reaches a model.

Modules:

* `metrics` — feedback metrics in dspy.GEPA's contract (`metric(gold, pred, trace, pred_name,
  pred_trace) -> dspy.Prediction(score, feedback)`): `HotpotQAMetric` (token F1, supporting titles as
  feedback), `AIMEMetric` (exact integer match, worked solution as feedback; `aime_pass_at_1`),
  `PupaMetric` (quality and leakage LM judges), `LiveBenchIFMetric` (constraint satisfaction) and
  `MixtureMetric`, which dispatches on the hidden `family` label.
* `ifeval` — the IFEval / LiveBench-IF instruction checkers (strict mode) and LiveBench's IF score.
* `retrieval` — `make_search_tool(...)`: a `search(query, k=3) -> list[str]` tool (ColBERTv2 server,
  a local colbert-ai index, or BM25 over a JSONL corpus) to hand to specialists by name.
* `sampler` — `FamilyBalancedSampler`, an AdaptiveGEPA `batch_sampler` that balances minibatches by a
  label the models never see.
* `programs` — the generic seed `SeedProgram` (`request -> response`) and `make_external_llm_tool`.

    from dspy_adaptive import AdaptiveGEPA
    from dspy_adaptive.tasks.metrics import MixtureMetric
    from dspy_adaptive.tasks.programs import SeedProgram
    from dspy_adaptive.tasks.retrieval import make_search_tool
    from dspy_adaptive.tasks.sampler import FamilyBalancedSampler

    search = make_search_tool(backend="bm25", corpus_path="my_corpus.jsonl")
    optimizer = AdaptiveGEPA(MixtureMetric(judge_lm=judge), reflection_lm=reflection, max_metric_calls=2000,
                             tools=[search], batch_sampler=FamilyBalancedSampler())
    routed = optimizer.compile(SeedProgram(), trainset=train, valset=val)
"""

INPUT_FIELD = "request"
#: The longest response (characters, after removing thinking blocks) the IFEval / LiveBench-IF checkers and
#: the PUPA LM judges read. A longer one is not read: it follows no instruction, and is not judged (quality
#: "worse", a longer request sent out counts as leaking every annotated item). 20,000 characters is about
#: 3,000 English words, well above the longest length instruction of either data set (IFEval "at least 800
#: words", LiveBench-IF 497 words); at that length the slowest checker (NLTK's word tokenizer over many
#: one-word sentences) takes about 1.5 s, and every other one a few milliseconds.
MAX_CHECKED_CHARS = 20_000
#: The longest response the cheap metrics (HotpotQA token F1, AIME answer extraction) read; a longer one
#: scores 0 with feedback saying why. Everything they run is linear in the text.
MAX_METRIC_CHARS = 200_000
OUTPUT_FIELD = "response"
EXTERNAL_REQUEST_FIELD = "external_request"
FAMILIES = ("hotpotqa", "aime", "pupa", "livebench_if")

__all__ = ["EXTERNAL_REQUEST_FIELD", "FAMILIES", "INPUT_FIELD", "MAX_CHECKED_CHARS", "MAX_METRIC_CHARS", "OUTPUT_FIELD"]
