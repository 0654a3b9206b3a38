"""What a user reads (issue 28): accepted edits shown even when they did not beat the seed, failed rollouts with
their error, no $0.0000 tables for unpriced local models, and a progress bar whose estimate counts the time spent
between scored calls and whose percentage survives the last iteration's overshoot."""

from __future__ import annotations

import io
import time

from dspy_adaptive.lm.usage import UsageMeter
from dspy_adaptive.record.run_record import fault_summary, render_markdown, usage_lines
from dspy_adaptive.schema import RowResult
from dspy_adaptive.search.progress import SearchProgress
from tests.plots.synthetic import make_result


def test_accepted_edits_are_shown_also_when_they_do_not_beat_the_seed():
    text = render_markdown(make_result())
    section = text.split("## Accepted edits", 1)[1].split("\n## ", 1)[0]
    assert "| 5 | #4 | rewrite_program | 1 | 1.00 -> 2.00 | 0.5000 | tie |" in section     # = the seed's 0.5
    assert "Candidate #4 (`rewrite_program`):" in section and "# v2" in section          # what it changed
    assert "| 4 | #3 | merge |" in section and "- slot 2 (deep): Upper-casing" in section


def test_failed_rollouts_are_reported_with_their_error():
    rows = [_row("LMTransportError: [hosted_vllm/x] failed to connect to 127.0.0.1:8000\nmore"), _row("ValueError: x"),
            _row("LMTransportError: [hosted_vllm/x] failed to connect to 127.0.0.1:8000\nmore")]
    faults = fault_summary([], rows)
    assert faults["failed_rollout_errors"][0] == ["LMTransportError: [hosted_vllm/x] failed to connect to "
                                                  "127.0.0.1:8000", 2]
    result = make_result()
    result = type(result)(**{**result.__dict__, "faults": faults})
    said = render_markdown(result).split("What the failed rollouts raised", 1)[1].split("\n\n", 2)[1]
    assert said.startswith("- 2 x: LMTransportError: ") and "failed to connect to 127.0.0.1:8000" in said


def test_a_local_run_has_no_dollar_table_it_says_unpriced():
    meter = UsageMeter()
    meter.add("router", {"prompt_tokens": 10, "completion_tokens": 2}, model="local/SmolLM2-135M-Instruct.Q4_1")
    assert meter.shown_cost() is None
    result = make_result()
    local = type(result)(**{**result.__dict__, "usage": meter.snapshot()})
    text = "\n".join(usage_lines(local))
    assert "unpriced" in text and "0.0000" not in text and "| USD |" not in text
    meter.add("reflection", {"prompt_tokens": 1000, "completion_tokens": 100, "cost": 0.01}, model="openai/x")
    mixed = type(result)(**{**result.__dict__, "usage": meter.snapshot()})
    text = "\n".join(usage_lines(mixed))
    assert "| router | 1 | 10 | 2 | unpriced |" in text and "0.0100 (+1 unpriced)" in text
    assert meter.shown_cost() == 0.01


def test_the_bar_counts_reflection_time_and_keeps_its_percentage_past_the_budget():
    bar = SearchProgress(True)
    bar.open(total=10, initial=0)
    bar._bar.fp = io.StringIO()
    bar.tick(2)
    time.sleep(0.6)                      # reflection: no scored call for a while
    bar.tick(2)
    pace = bar._bar.format_dict
    assert pace["n"] / pace["elapsed"] < 4 / 0.55             # the estimate's rate includes the pause
    bar.tick(9)                                                # the last iteration overshoots by 3
    meter = bar._bar.format_meter(**bar._bar.format_dict)
    assert "100%" in meter and "13/13" in meter and "budget 10 exceeded by 3" in meter
    bar.show(13, best=0.5, archive=2, cost=None)
    assert "cost" not in bar._bar.format_meter(**bar._bar.format_dict)
    bar.close()
    resumed = SearchProgress(True)                             # a finished run resumed past its budget
    resumed.open(total=12, initial=16)
    resumed._bar.fp = io.StringIO()
    meter = resumed._bar.format_meter(**resumed._bar.format_dict)
    assert "100%" in meter and "16/16" in meter and "budget 12 exceeded by 4" in meter
    resumed.close()


def _row(error):
    return RowResult(row_id="r", score=0.0, feedback="", output=None, selected=None, executed=None,
                     fallback_reason=None, error=error, steps=(), error_kind=error.split(":")[0])
