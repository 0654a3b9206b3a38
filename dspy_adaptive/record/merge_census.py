"""The merge census and the budget accounting of a run, in the paper's terms (Appendices H and L).

* `merge_census`: merge checks (five-row gate checks run), their scores, passes (validated and archived),
  parent copies, and the Table 10 classes of the accepted merges ("All 26 accepted merges": 10 with pairs
  from both parents, 13 identical to a parent, 3 differing only in inactive code).
* `budget_accounting`: the scored calls as the paper counts them, "14,455 validation + 3,648 feedback
  scores = 18,103": feedback = parent + child minibatch scores; validation = full validations (seed
  included) + merge-check scores. The identity total == feedback + validation holds exactly.

Both read only the proposal records (dicts, as in run.json / `detailed_results.proposals`) and the budget
counts by kind.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping

from dspy_adaptive.merge.classify import CLASSES


def merge_census(proposals: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    merges = [p for p in proposals if p["kind"] == "merge"]
    checked = [p for p in merges if p.get("failure") != "merge_copy"]
    passed = [p for p in checked if p["accepted"]]
    classes = Counter((p.get("details") or {}).get("classification", "other") for p in passed)
    return {
        "checks": len(checked),
        "check_scores": sum(len(p["minibatch"]) for p in checked),
        "passed": len(passed),
        "validated": len(passed),
        "parent_copies_checked": sum(1 for p in checked if (p.get("details") or {}).get("parent_copy") is not None),
        "parent_copies_skipped": len(merges) - len(checked),
        "classes": {c: classes.get(c, 0) for c in CLASSES},
    }


def budget_accounting(by_kind: Mapping[str, int]) -> dict[str, int]:
    feedback = int(by_kind.get("parent_minibatch", 0)) + int(by_kind.get("child_minibatch", 0))
    full = int(by_kind.get("seed_validation", 0)) + int(by_kind.get("validation", 0))
    checks = int(by_kind.get("merge_check", 0))
    return {"feedback": feedback, "full_validation": full, "merge_check": checks,
            "validation": full + checks, "total": feedback + full + checks}


__all__ = ["budget_accounting", "merge_census"]
