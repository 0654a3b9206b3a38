"""DSPy's own test files, fetched into upstream/ (git-ignored), are run by test_dspy_gepa_suite.py in a
subprocess of their own, never collected as this project's tests."""

collect_ignore = ["upstream"]
