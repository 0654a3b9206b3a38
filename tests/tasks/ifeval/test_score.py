"""LiveBench-IF score arithmetic and <think> removal."""

import pytest

from dspy_adaptive.tasks.ifeval import livebench_if_score, strip_thinking

NO_COMMA = "punctuation:no_comma"
QUOTE = "startend:quotation"


def test_all_followed_scores_one():
    score, results = livebench_if_score('"No commas here."', [NO_COMMA, QUOTE], [{}, {}], "p")
    assert score == 1.0 and all(r.followed for r in results)


def test_none_followed_scores_zero():
    score, results = livebench_if_score("Yes, commas.", [NO_COMMA, QUOTE], [{}, {}], "p")
    assert score == 0.0 and not any(r.followed for r in results)


def test_half_of_four_scores_quarter():
    ids = [NO_COMMA, QUOTE, "detectable_format:title", "keywords:existence"]
    kwargs = [{}, {}, {}, {"keywords": ["apple"]}]
    score, results = livebench_if_score("<<Title>> an apple, a pear", ids, kwargs, "p")
    assert [r.followed for r in results] == [False, False, True, True]
    assert score == pytest.approx(0.25)


def test_three_of_four_scores():
    ids = [NO_COMMA, QUOTE, "detectable_format:title", "keywords:existence"]
    kwargs = [{}, {}, {}, {"keywords": ["apple"]}]
    score, _ = livebench_if_score("<<Title>> an apple and a pear", ids, kwargs, "p")
    assert score == pytest.approx((0 + 0.75) / 2)


def test_think_blocks_are_removed_before_checking():
    response = "<think>\nHmm, let me think, with commas.\n</think>\n\n  \"Final answer without commas\"\n"
    score, results = livebench_if_score(response, [NO_COMMA, QUOTE], [{}, {}], "p")
    assert score == 1.0, [r.detail for r in results]


def test_strip_thinking():
    assert strip_thinking("<think>a</think> b <think>c\nd</think> e ") == "b  e"
    assert strip_thinking("reasoning, with commas</think>\nanswer") == "answer"
    assert strip_thinking("  plain  ") == "plain"


def test_only_thinking_is_empty_and_scores_zero():
    score, results = livebench_if_score("<think>all, of it</think>", [NO_COMMA], [{}], "p")
    assert score == 0.0 and results[0].detail == "empty response"
