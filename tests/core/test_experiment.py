"""The one experiment pipeline (issue 26): a split is scored by `score_split` (the search's scoring rules) and two
scored splits are compared by the one statistics routine, which the demo and the protocol report both call."""

from __future__ import annotations

import dspy

from dspy_adaptive import RoutedProgram
from dspy_adaptive.demo.run import paired_gain
from dspy_adaptive.record.experiment import compare, score_split
from dspy_adaptive.record.paired import paired_comparison
from tests.core import toy


def test_a_split_is_scored_with_the_searchs_rules_and_attempts_are_averaged():
    examples = toy.make_examples(3)
    with dspy.context(lm=toy.actor_lm()):
        program = RoutedProgram(dspy.Predict("question -> answer"))
        scored = score_split(program, examples, toy.metric, num_threads=2,
                             attempts=lambda ex: 2 if ex.id.startswith("a") else 1)
    assert [s.id for s in scored] == [ex.id for ex in examples]               # the examples' order
    by_id = {s.id: s for s in scored}
    assert len(by_id["a0"].attempts) == 2 and len(by_id["c0"].attempts) == 1
    assert by_id["c0"].score == 1.0 and by_id["a0"].score == 0.0              # the fallback answers caps only
    assert by_id["a0"].family == "arith-label" and by_id["c0"].executed == 0   # family kept, fallback ran

    def broken(gold, pred, trace=None, pred_name=None, pred_trace=None):
        raise RuntimeError("judge down")

    with dspy.context(lm=toy.actor_lm()):
        failed = score_split(program, examples[:2], broken)
    assert all(s.score == 0.0 and "metric failed" in s.errors[0] for s in failed)   # a failing metric scores 0


def test_the_demo_and_the_protocol_report_compute_the_same_comparison():
    seed = [{"id": f"r{i}", "score": float(i % 3 == 0)} for i in range(12)]
    optimized = [{"id": f"r{i}", "score": float(i % 3 != 1)} for i in range(12)][::-1]   # another order
    ours = paired_gain(seed, optimized)
    assert ours == compare(seed, optimized)
    ordered = {r["id"]: r["score"] for r in optimized}
    assert ours == paired_comparison([r["score"] for r in seed], [ordered[r["id"]] for r in seed])
    assert paired_gain(seed[:3], optimized).too_small                     # three pairs: too few to tell
    assert paired_gain(seed, [{"id": "other", "score": 1.0}]) is None     # nothing in both
