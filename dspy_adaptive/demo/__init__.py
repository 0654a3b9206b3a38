"""The offline demo: a built-in mini mixture of four task families and the run behind `adaptive-gepa demo`.

* `load_demo_mixture()` -> `(train, val, test)` lists of `dspy.Example` (input `request`; `family`,
  `subtask` and the gold fields ride along as labels), `demo_corpus_path()` for the retrieval corpus.
  The data was written by hand for this project (see `data/README.md`).
* `run_demo(out, ...)` (`dspy_adaptive.demo.run`): Adaptive-GEPA end to end on the mixture with the
  program, metrics, sampler and retrieval tool of `dspy_adaptive.tasks`; writes a report, plots, the
  saved program and the exported library, and resumes on rerun.
"""

from dspy_adaptive.demo.mixture import (
    FAMILIES,
    SPLITS,
    demo_corpus_path,
    load_demo_corpus,
    load_demo_mixture,
    load_family,
)

__all__ = ["FAMILIES", "SPLITS", "demo_corpus_path", "load_demo_corpus", "load_demo_mixture", "load_family"]
