"""The run record: what a finished run leaves behind and how people and tools read it -- the run's results
(run.json, report.md, plots), dspy.GEPA's detailed results, analysis helpers for the notebook, experiment
tracking (MLflow, W&B) and the merge census."""
