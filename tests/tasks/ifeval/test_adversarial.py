"""Responses are hostile input: every checker reads a bounded response, in time linear in it.

* The three reference regular expressions that take quadratic time under `findall` (placeholders, bullet
  lines, titles) and the `<think>` stripper are replaced by scans that return exactly what the
  expressions return: compared here on thousands of random strings over each expression's characters.
* Every checker, through `check_instruction`, on long runs of the characters its expressions use, at the
  cap (`MAX_CHECKED_CHARS`) finishes within a time bound; the linear scans stay fast far past the cap
  (where the quadratic originals take minutes).
* A response longer than the cap is not read: it follows no instruction, and the detail says why.
"""

from __future__ import annotations

import random
import re
import time

import pytest

from dspy_adaptive.tasks import MAX_CHECKED_CHARS
from dspy_adaptive.tasks.ifeval import evaluate_instructions, strip_thinking
from dspy_adaptive.tasks.ifeval.checkers import (
    INSTRUCTION_IDS,
    check_instruction,
    count_bullet_lines,
    count_placeholders,
    find_titles,
)
from dspy_adaptive.tasks.metrics import parse_integer_answer
from dspy_adaptive.tasks.metrics import strip_thinking as metric_strip_thinking
from dspy_adaptive.tasks.text import remove_think_blocks

KWARGS = {
    "keywords:existence": {"keywords": ["alpha", "beta"]},
    "keywords:frequency": {"keyword": "alpha", "frequency": 2, "relation": "at least"},
    "keywords:forbidden_words": {"forbidden_words": ["alpha", "beta gamma"]},
    "keywords:letter_frequency": {"letter": "a", "let_frequency": 3, "let_relation": "at least"},
    "language:response_language": {"language": "en"},
    "length_constraints:number_sentences": {"num_sentences": 3, "relation": "less than"},
    "length_constraints:number_paragraphs": {"num_paragraphs": 3},
    "length_constraints:number_words": {"num_words": 30, "relation": "at least"},
    "length_constraints:nth_paragraph_first_word": {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "alpha"},
    "detectable_content:number_placeholders": {"num_placeholders": 2},
    "detectable_content:postscript": {"postscript_marker": "P.S."},
    "detectable_format:number_bullet_lists": {"num_bullets": 3},
    "detectable_format:constrained_response": {},
    "detectable_format:number_highlighted_sections": {"num_highlights": 2},
    "detectable_format:multiple_sections": {"section_spliter": "Section", "num_sections": 2},
    "detectable_format:json_format": {},
    "detectable_format:title": {},
    "combination:two_responses": {},
    "combination:repeat_prompt": {"prompt_to_repeat": "Write alpha"},
    "startend:end_checker": {"end_phrase": "Any other questions?"},
    "startend:quotation": {},
    "change_case:capital_word_frequency": {"capital_frequency": 3, "capital_relation": "at least"},
    "change_case:english_capital": {},
    "change_case:english_lowercase": {},
    "punctuation:no_comma": {},
}

#: Runs of the characters the checkers' expressions and tokenizers use: whitespace (the \s* and \s?
#: prefixes), "*", "-", "[", "<<"/">>", "***"/"******" splitters, periods and abbreviations (Punkt),
#: capitals and quotes (the Treebank tokenizer), JSON openers, section splitters, thinking tags.
UNITS = [" ", "\n", " \n", "\n\n", "\t", "*", "**", "* ", "- ", "-", "[", "[a", "<<", "<<a", ">>", "***", "******",
         "p. ", "p.s", "P.P.", "a.", "A. ", "'", '"', "`", "```", "{", '{"a":', "[[", "1,", ",", "Section 1 ",
         "alpha ", "A", "ab ", "<think>", "é "]
TIME_BOUND = 3.0     # CPU seconds per checker call at the cap (the slowest, NLTK on "A. A. A. ...", takes ~1.5 s);
#                      CPU time of this thread, so a loaded machine (other processes on its cores) does not count


def test_kwargs_cover_every_instruction():
    assert set(KWARGS) == set(INSTRUCTION_IDS)


@pytest.mark.parametrize("unit", UNITS)
def test_every_checker_is_bounded_on_adversarial_runs_at_the_cap(unit):
    text = (unit * (MAX_CHECKED_CHARS // len(unit) + 1))[:MAX_CHECKED_CHARS]
    evaluate_instructions("warm up. A b.", ["change_case:capital_word_frequency", "language:response_language"],
                          [KWARGS["change_case:capital_word_frequency"], KWARGS["language:response_language"]], "")
    slow = []
    for iid in INSTRUCTION_IDS:
        t0 = time.thread_time()
        followed, detail = check_instruction(iid, text, KWARGS[iid], "Write alpha")
        elapsed = time.thread_time() - t0
        assert isinstance(followed, bool) and isinstance(detail, str)
        if elapsed > TIME_BOUND:
            slow.append((iid, round(elapsed, 2)))
    assert not slow, f"checkers slower than {TIME_BOUND}s on {unit!r} x {MAX_CHECKED_CHARS}: {slow}"


def test_a_response_over_the_cap_is_not_read_and_follows_nothing():
    text = "alpha beta. " * (MAX_CHECKED_CHARS // 12 + 1)
    assert len(text) > MAX_CHECKED_CHARS
    for iid in INSTRUCTION_IDS:
        followed, detail = check_instruction(iid, text, KWARGS[iid], "Write alpha")
        assert not followed and "not checked" in detail and f"{MAX_CHECKED_CHARS:,}" in detail
    # and at the cap it is read: the same text cut to the cap contains both keywords
    assert check_instruction("keywords:existence", text[:MAX_CHECKED_CHARS], KWARGS["keywords:existence"], "")[0]


def test_deeply_nested_json_is_invalid_json_not_a_crash():
    followed, detail = check_instruction("detectable_format:json_format", "[" * 5000, {}, "")
    assert not followed and "nested too deeply" in detail


# ---------------------------------------------------------------------------- the linear scans are exact

def _random_texts(alphabet, n=4000, max_len=14, seed=0):
    rng = random.Random(seed)
    return [rng.choices(alphabet, k=rng.randint(0, max_len)) for _ in range(n)]


def test_placeholder_count_equals_the_reference_expression():
    for chars in _random_texts(["[", "]", "a", "\n", " "]):
        text = "".join(chars)
        assert count_placeholders(text) == len(re.findall(r"\[.*?\]", text)), repr(text)


@pytest.mark.parametrize("star", [True, False])
def test_bullet_count_equals_the_reference_expression(star):
    pattern = r"^\s*\*[^\*].*$" if star else r"^\s*-.*$"
    for chars in _random_texts(["*", "-", "a", "\n", " ", "\t", "\u2028"], n=6000, seed=1 + star):
        text = "".join(chars)
        assert count_bullet_lines(text, star) == len(re.findall(pattern, text, flags=re.MULTILINE)), repr(text)


def test_titles_equal_the_reference_expression():
    for chars in _random_texts(["<<", ">>", "<", ">", "a", " ", "\n"], seed=3):
        text = "".join(chars)
        assert find_titles(text) == re.findall(r"<<[^\n]+>>", text), repr(text)


def test_think_removal_equals_the_reference_expression():
    for chars in _random_texts(["<think>", "</think>", "a", "<", ">", "\n"], seed=4):
        text = "".join(chars)
        assert remove_think_blocks(text) == re.sub(r"<think>.*?</think>", "", text, flags=re.S), repr(text)


@pytest.mark.parametrize("marker", ["P.S.", "P.P.S"])
def test_postscript_verdict_equals_the_reference_expression(marker):
    pattern = r"\s*p\.\s?p\.\s?s.*$" if marker == "P.P.S" else r"\s*p\.\s?s\..*$"
    for chars in _random_texts(["p", ".", "s", " ", "\n", "P", "S"], n=3000, seed=5):
        text = "".join(chars) + " x"
        want = bool(re.findall(pattern, text.lower(), flags=re.MULTILINE))
        got = check_instruction("detectable_content:postscript", text, {"postscript_marker": marker}, "")[0]
        assert got == want, repr(text)


# ---------------------------------------------------------------------------- linear far past the cap

BIG = 8 * MAX_CHECKED_CHARS   # the quadratic originals take minutes here (~3 s at 20,000 characters)


@pytest.mark.parametrize("name, fn, text", [
    ("placeholders", count_placeholders, "[" * BIG),
    ("bullets (newlines)", lambda t: count_bullet_lines(t, True), "\n" * BIG + "x"),
    ("bullets (spaces)", lambda t: count_bullet_lines(t, False), " \n" * (BIG // 2)),
    ("titles", find_titles, "<<" * (BIG // 2)),
    ("think tags", remove_think_blocks, "<think>" * (BIG // 7)),
    ("strip_thinking (ifeval)", strip_thinking, "<think>" * (BIG // 7)),
    ("strip_thinking (metrics)", metric_strip_thinking, "<think>" * (BIG // 7)),
    ("AIME answer", parse_integer_answer, "answer " * (BIG // 7) + "\\boxed{" * 1000 + "1," * (BIG // 2)),
])
def test_scans_stay_linear_far_past_the_cap(name, fn, text):
    t0 = time.perf_counter()
    fn(text)
    assert time.perf_counter() - t0 < 1.0, name


def test_postscript_is_linear_far_past_the_cap():
    from dspy_adaptive.tasks.ifeval.checkers import _REGISTRY
    for text in (" " * BIG, "\n" * BIG, "p." * (BIG // 2)):
        t0 = time.perf_counter()
        _REGISTRY["detectable_content:postscript"].check(text, "", {"postscript_marker": "P.P.S"})
        assert time.perf_counter() - t0 < 1.0
