"""One checker per IFEval instruction id, strict mode.

Each checker follows the ``check_following`` of Google's ``instruction_following_eval/
instructions.py`` as vendored by LiveBench (``livebench/if_runner/instruction_following_eval``);
the two agree on every id registered here. A checker takes the (already cleaned) response, the
prompt and the instruction's kwargs (``None`` values already dropped) and returns
``(followed, detail)``.

Where the reference would *randomise* a missing or invalid argument (it reuses the prompt
generator's ``build_description``), a checker raises ``InstructionArgumentError`` instead, so a
verdict never depends on chance. Two deliberate deviations, both for determinism:

* ``keywords:letter_frequency`` with a ``letter`` that is not one ASCII letter (the IFEval data
  has ``"#"`` and ``"!"``): the reference swaps in a random letter; here the given character is
  counted, which is what the prompt asks for.
* ``combination:repeat_prompt`` without ``prompt_to_repeat``: the reference crashes; here the text
  to repeat is taken from the prompt as LiveBench's generator builds it (everything before
  "First repeat the request word for word without change,").

Keywords, forbidden words, keyword-frequency words and section splitters are used as regular
expressions exactly as the reference does (``re.search(keyword, ...)``); a string that is not a
valid pattern is matched literally instead of raising.
"""

from __future__ import annotations

import collections
import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from dspy_adaptive.tasks import MAX_CHECKED_CHARS
from dspy_adaptive.tasks.text import too_long

from . import text_util

__all__ = [
    "INSTRUCTION_IDS",
    "InstructionArgumentError",
    "UnknownInstructionError",
    "check_instruction",
]

_RELATIONS = ("less than", "at least")
_CONSTRAINED_RESPONSE_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
_REPEAT_MARKER = "First repeat the request word for word without change,"


class UnknownInstructionError(ValueError):
    """An instruction id that no checker implements."""

    def __init__(self, instruction_id: str):
        self.instruction_id = instruction_id
        super().__init__(
            f"unknown instruction id {instruction_id!r}; known ids: {', '.join(INSTRUCTION_IDS)}"
        )


class InstructionArgumentError(ValueError):
    """Missing, unexpected or invalid kwargs for a known instruction id."""


# --------------------------------------------------------------------------- helpers


def _regex(pattern: str, flags: int = re.IGNORECASE) -> re.Pattern[str]:
    try:
        return re.compile(pattern, flags)
    except re.error:
        return re.compile(re.escape(pattern), flags)


def _int_arg(iid: str, name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise InstructionArgumentError(f"{iid}: {name} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise InstructionArgumentError(f"{iid}: {name} must be an integer, got {value!r}") from None
    if not as_float.is_integer():
        raise InstructionArgumentError(f"{iid}: {name} must be an integer, got {value!r}")
    return int(as_float)


def _relation_arg(iid: str, name: str, value: Any) -> str:
    if value not in _RELATIONS:
        raise InstructionArgumentError(f"{iid}: {name} must be one of {_RELATIONS}, got {value!r}")
    return value


def _str_arg(iid: str, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InstructionArgumentError(f"{iid}: {name} must be a non-empty string, got {value!r}")
    return value


def _str_list_arg(iid: str, name: str, value: Any) -> list[str]:
    if isinstance(value, str) or not value or not all(isinstance(v, str) for v in value):
        raise InstructionArgumentError(f"{iid}: {name} must be a non-empty list of strings, got {value!r}")
    return list(value)


def _compare(actual: int, relation: str, threshold: int) -> bool:
    return actual < threshold if relation == "less than" else actual >= threshold


def _needs(relation: str, threshold: int, what: str, actual: int) -> str:
    return f"needs {relation} {threshold} {what}, found {actual}"


def _preview(text: str, limit: int = 40) -> str:
    text = text.replace("\n", "\\n")
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


# --------------------------------------------------------------------------- linear-time scans
# Three of the reference's regular expressions take quadratic time on adversarial responses (findall
# retries them from every position: a line of 20,000 "[" costs ~3 s, 20,000 newlines ~2 s). These scans
# return exactly what the reference's findall returns (tests/tasks/ifeval compares them on random text)
# in one pass.


def count_placeholders(text: str) -> int:
    """``len(re.findall(r"\\[.*?\\]", text))``: from each "[", the first "]" on the same line."""
    count, pos = 0, 0
    while (i := text.find("[", pos)) >= 0:
        nl = text.find("\n", i)
        j = text.find("]", i + 1, len(text) if nl < 0 else nl)
        if j >= 0:
            count, pos = count + 1, j + 1
        elif nl < 0:
            break
        else:
            pos = nl + 1     # no "]" after this "[" on its line: none after any later "[" there either
    return count


def count_bullet_lines(text: str, star: bool) -> int:
    """``len(re.findall(r"^\\s*\\*[^\\*].*$", text, re.M))`` (star) or ``r"^\\s*-.*$"`` (dash)."""
    count, pos, n = 0, 0, len(text)
    while pos <= n:
        if pos > 0 and text[pos - 1] != "\n":       # the next line start at or after pos
            nl = text.find("\n", pos)
            if nl < 0:
                break
            pos = nl + 1
        k = pos
        while k < n and text[k].isspace():          # \s* (it may cross lines, as in the reference)
            k += 1
        if star:
            hit, body = k + 1 < n and text[k] == "*" and text[k + 1] != "*", k + 2
        else:
            hit, body = k < n and text[k] == "-", k + 1
        if hit:
            count += 1
            end = text.find("\n", body)                # ".*$": to the end of the line
            pos = n if end < 0 else end
            if end < 0:
                break
        elif k >= n:
            break
        else:
            pos = k + 1      # every line start in [pos, k] fails the same way: go past k
    return count


def find_titles(text: str) -> list[str]:
    """``re.findall(r"<<[^\\n]+>>", text)``: per line, from its first "<<" to its last ">>" (at least one
    character between them), or nothing."""
    titles = []
    for line in text.split("\n"):
        start = line.find("<<")
        if start >= 0:
            end = line.rfind(">>")
            if end >= start + 3:
                titles.append(line[start:end + 2])
    return titles


# --------------------------------------------------------------------------- checkers
# Signature: (response, prompt, kwargs) -> (followed, detail). kwargs is validated by the
# registry (required/optional names) before the call.

Result = tuple[bool, str]


def _keywords_existence(value: str, prompt: str, kw: dict) -> Result:
    iid = "keywords:existence"
    keywords = sorted(_str_list_arg(iid, "keywords", kw["keywords"]))
    missing = [k for k in keywords if not _regex(k).search(value)]
    if missing:
        return False, f"missing keyword(s) {missing} (case-insensitive substring)"
    return True, f"contains all of {keywords}"


def _keywords_frequency(value: str, prompt: str, kw: dict) -> Result:
    iid = "keywords:frequency"
    keyword = _str_arg(iid, "keyword", kw["keyword"]).strip()
    frequency = _int_arg(iid, "frequency", kw["frequency"])
    relation = _relation_arg(iid, "relation", kw["relation"])
    count = len(_regex(keyword).findall(value))
    return _compare(count, relation, frequency), _needs(relation, frequency, f"occurrences of {keyword!r}", count)


def _keywords_forbidden_words(value: str, prompt: str, kw: dict) -> Result:
    iid = "keywords:forbidden_words"
    words = sorted(set(_str_list_arg(iid, "forbidden_words", kw["forbidden_words"])))
    used = [w for w in words if _regex(r"\b" + w + r"\b").search(value)]
    if used:
        return False, f"uses forbidden word(s) {used}"
    return True, f"uses none of {words}"


def _keywords_letter_frequency(value: str, prompt: str, kw: dict) -> Result:
    iid = "keywords:letter_frequency"
    letter = kw["letter"]
    if not isinstance(letter, str) or len(letter.strip() or letter) != 1:
        raise InstructionArgumentError(f"{iid}: letter must be a single character, got {letter!r}")
    letter = (letter.strip() or letter).lower()
    frequency = _int_arg(iid, "let_frequency", kw["let_frequency"])
    relation = _relation_arg(iid, "let_relation", kw["let_relation"])
    count = collections.Counter(value.lower())[letter]
    return _compare(count, relation, frequency), _needs(relation, frequency, f"occurrences of letter {letter!r}", count)


def _response_language(value: str, prompt: str, kw: dict) -> Result:
    language = _str_arg("language:response_language", "language", kw["language"])
    try:
        detected = text_util.detect_language(value)
    except text_util.LanguageUndetectable:
        return True, f"language undetectable; counted as followed (as IFEval does), wanted {language!r}"
    return detected == language, f"needs language {language!r}, detected {detected!r}"


def _number_sentences(value: str, prompt: str, kw: dict) -> Result:
    iid = "length_constraints:number_sentences"
    threshold = _int_arg(iid, "num_sentences", kw["num_sentences"])
    relation = _relation_arg(iid, "relation", kw["relation"])
    count = text_util.count_sentences(value)
    return _compare(count, relation, threshold), _needs(relation, threshold, "sentences", count)


def _number_paragraphs(value: str, prompt: str, kw: dict) -> Result:
    expected = _int_arg("length_constraints:number_paragraphs", "num_paragraphs", kw["num_paragraphs"])
    paragraphs = re.split(r"\s?\*\*\*\s?", value)
    count = len(paragraphs)
    for index, paragraph in enumerate(paragraphs):
        if not paragraph.strip():
            if index in (0, len(paragraphs) - 1):
                count -= 1
            else:
                return False, f"empty paragraph between '***' dividers (position {index + 1})"
    return count == expected, f"needs exactly {expected} '***'-separated paragraphs, found {count}"


def _number_words(value: str, prompt: str, kw: dict) -> Result:
    iid = "length_constraints:number_words"
    threshold = _int_arg(iid, "num_words", kw["num_words"])
    relation = _relation_arg(iid, "relation", kw["relation"])
    count = text_util.count_words(value)
    return _compare(count, relation, threshold), _needs(relation, threshold, "words", count)


def _nth_paragraph_first_word(value: str, prompt: str, kw: dict) -> Result:
    iid = "length_constraints:nth_paragraph_first_word"
    expected = _int_arg(iid, "num_paragraphs", kw["num_paragraphs"])
    nth = _int_arg(iid, "nth_paragraph", kw["nth_paragraph"])
    if nth <= 0 or nth > expected:
        raise InstructionArgumentError(f"{iid}: nth_paragraph must be in 1..{expected}, got {nth}")
    wanted = _str_arg(iid, "first_word", kw["first_word"]).lower()

    paragraphs = re.split(r"\n\n", value)
    count = sum(1 for p in paragraphs if p.strip())
    if nth > count:
        return False, (f"needs {expected} paragraphs with paragraph {nth} starting {wanted!r}, "
                       f"found only {count} paragraphs")
    # As in the reference, the nth piece of the raw split is inspected (empty pieces included).
    paragraph = paragraphs[nth - 1].strip()
    if not paragraph:
        return False, f"paragraph {nth} is empty"
    word = paragraph.split()[0].strip().lstrip("'").lstrip('"')
    first_word = ""
    for letter in word:
        if letter in {".", ",", "?", "!", "'", '"'}:
            break
        first_word += letter.lower()
    ok = count == expected and first_word == wanted
    return ok, (
        f"needs {expected} '\\n\\n'-separated paragraphs with paragraph {nth} starting {wanted!r}; "
        f"found {count} paragraphs, paragraph {nth} starts {first_word!r}"
    )


def _number_placeholders(value: str, prompt: str, kw: dict) -> Result:
    expected = _int_arg("detectable_content:number_placeholders", "num_placeholders", kw["num_placeholders"])
    count = count_placeholders(value)
    return count >= expected, _needs("at least", expected, "[placeholders]", count)


def _postscript(value: str, prompt: str, kw: dict) -> Result:
    marker = _str_arg("detectable_content:postscript", "postscript_marker", kw["postscript_marker"]).strip()
    lowered = value.lower()
    # The reference runs findall(r"\s*" + marker + r".*$", re.M) and asks whether anything matched. The
    # leading \s* may match nothing and ".*$" always matches under re.M, so that is exactly "the marker
    # occurs": searched without them, because findall retries \s* from every position of a whitespace
    # run (quadratic time on a response of blank lines).
    if marker == "P.P.S":
        pattern = r"p\.\s?p\.\s?s"
    elif marker == "P.S.":
        pattern = r"p\.\s?s\."
    else:
        pattern = marker.lower()
    found = _regex(pattern, re.MULTILINE).search(lowered)
    if found:
        return True, f"has a postscript starting with {marker!r}"
    return False, f"no postscript starting with {marker!r}"


def _number_bullet_lists(value: str, prompt: str, kw: dict) -> Result:
    expected = _int_arg("detectable_format:number_bullet_lists", "num_bullets", kw["num_bullets"])
    count = count_bullet_lines(value, star=True) + count_bullet_lines(value, star=False)
    return count == expected, f"needs exactly {expected} bullet points ('* ' or '-' lines), found {count}"


def _constrained_response(value: str, prompt: str, kw: dict) -> Result:
    stripped = value.strip()
    for option in _CONSTRAINED_RESPONSE_OPTIONS:
        if option in stripped:
            return True, f"contains {option!r}"
    return False, f"contains none of {list(_CONSTRAINED_RESPONSE_OPTIONS)}"


def _number_highlighted_sections(value: str, prompt: str, kw: dict) -> Result:
    expected = _int_arg("detectable_format:number_highlighted_sections", "num_highlights", kw["num_highlights"])
    count = sum(1 for h in re.findall(r"\*[^\n\*]*\*", value) if h.strip("*").strip())
    count += sum(
        1 for h in re.findall(r"\*\*[^\n\*]*\*\*", value) if h.removeprefix("**").removesuffix("**").strip()
    )
    return count >= expected, _needs("at least", expected, "*highlighted* sections", count)


def _multiple_sections(value: str, prompt: str, kw: dict) -> Result:
    iid = "detectable_format:multiple_sections"
    splitter = _str_arg(iid, "section_spliter", kw["section_spliter"]).strip()
    expected = _int_arg(iid, "num_sections", kw["num_sections"])
    sections = _regex(r"\s?" + splitter + r"\s?\d+\s?", 0).split(value)
    count = len(sections) - 1
    return count >= expected, _needs("at least", expected, f"'{splitter} N' sections", count)


def _json_format(value: str, prompt: str, kw: dict) -> Result:
    body = (
        value.strip()
        .removeprefix("```json")
        .removeprefix("```Json")
        .removeprefix("```JSON")
        .removeprefix("```")
        .removesuffix("```")
        .strip()
    )
    try:
        json.loads(body)
    except ValueError as exc:
        return False, f"not valid JSON ({exc.__class__.__name__}: {str(exc)[:60]})"
    except RecursionError:   # e.g. thousands of "[": Python's parser gives up (the reference would crash)
        return False, "not valid JSON (nested too deeply to parse)"
    return True, "whole response parses as JSON"


def _title(value: str, prompt: str, kw: dict) -> Result:
    for title in find_titles(value):
        if title.lstrip("<").rstrip(">").strip():
            return True, f"has title {_preview(title)}"
    return False, "no non-empty <<title>>"


def _two_responses(value: str, prompt: str, kw: dict) -> Result:
    valid = []
    pieces = value.split("******")
    for index, piece in enumerate(pieces):
        if not piece.strip():
            if index not in (0, len(pieces) - 1):
                return False, "empty response between '******' separators"
        else:
            valid.append(piece)
    if len(valid) != 2:
        return False, f"needs exactly 2 '******'-separated responses, found {len(valid)}"
    if valid[0].strip() == valid[1].strip():
        return False, "the two responses are identical"
    return True, "two different '******'-separated responses"


def _repeat_prompt(value: str, prompt: str, kw: dict) -> Result:
    to_repeat = kw.get("prompt_to_repeat")
    if not to_repeat:
        to_repeat = prompt.split(_REPEAT_MARKER)[0]
    if not isinstance(to_repeat, str) or not to_repeat.strip():
        raise InstructionArgumentError("combination:repeat_prompt: no prompt_to_repeat and no prompt to take it from")
    if value.strip().lower().startswith(to_repeat.strip().lower()):
        return True, "starts by repeating the request"
    return False, (f"does not start with the request (expected {_preview(to_repeat.strip())}, "
                   f"got {_preview(value.strip())})")


def _end_checker(value: str, prompt: str, kw: dict) -> Result:
    phrase = _str_arg("startend:end_checker", "end_phrase", kw["end_phrase"]).strip().lower()
    ending = value.strip().strip('"').lower()
    if ending.endswith(phrase):
        return True, f"ends with {phrase!r}"
    return False, f"needs to end with {phrase!r}, ends with {_preview(ending[-len(phrase) - 10:])}"


def _quotation(value: str, prompt: str, kw: dict) -> Result:
    stripped = value.strip()
    ok = len(stripped) > 1 and stripped[0] == '"' and stripped[-1] == '"'
    return ok, "wrapped in double quotes" if ok else "not wrapped in double quotation marks"


def _capital_word_frequency(value: str, prompt: str, kw: dict) -> Result:
    iid = "change_case:capital_word_frequency"
    frequency = _int_arg(iid, "capital_frequency", kw["capital_frequency"])
    relation = _relation_arg(iid, "capital_relation", kw["capital_relation"])
    count = sum(1 for token in text_util.word_tokenize(value) if token.isupper())
    return _compare(count, relation, frequency), _needs(relation, frequency, "all-capital words", count)


def _english_case(value: str, want_upper: bool) -> Result:
    case = "capital" if want_upper else "lowercase"
    if not (value.isupper() if want_upper else value.islower()):
        return False, f"not all {case} letters"
    try:
        detected = text_util.detect_language(value)
    except text_util.LanguageUndetectable:
        return True, f"all {case}; language undetectable, counted as followed (as IFEval does)"
    if detected != "en":
        return False, f"all {case} but detected language {detected!r}, not 'en'"
    return True, f"English, all {case} letters"


def _english_capital(value: str, prompt: str, kw: dict) -> Result:
    return _english_case(value, want_upper=True)


def _english_lowercase(value: str, prompt: str, kw: dict) -> Result:
    return _english_case(value, want_upper=False)


def _no_comma(value: str, prompt: str, kw: dict) -> Result:
    count = value.count(",")
    return count == 0, "no commas" if count == 0 else f"needs no commas, found {count}"


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class _Spec:
    check: Callable[[str, str, dict], Result]
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()


_REGISTRY: dict[str, _Spec] = {
    "keywords:existence": _Spec(_keywords_existence, ("keywords",)),
    "keywords:frequency": _Spec(_keywords_frequency, ("keyword", "frequency", "relation")),
    "keywords:forbidden_words": _Spec(_keywords_forbidden_words, ("forbidden_words",)),
    "keywords:letter_frequency": _Spec(_keywords_letter_frequency, ("letter", "let_frequency", "let_relation")),
    "language:response_language": _Spec(_response_language, ("language",)),
    "length_constraints:number_sentences": _Spec(_number_sentences, ("num_sentences", "relation")),
    "length_constraints:number_paragraphs": _Spec(_number_paragraphs, ("num_paragraphs",)),
    "length_constraints:number_words": _Spec(_number_words, ("num_words", "relation")),
    "length_constraints:nth_paragraph_first_word": _Spec(
        _nth_paragraph_first_word, ("num_paragraphs", "nth_paragraph", "first_word")
    ),
    "detectable_content:number_placeholders": _Spec(_number_placeholders, ("num_placeholders",)),
    "detectable_content:postscript": _Spec(_postscript, ("postscript_marker",)),
    "detectable_format:number_bullet_lists": _Spec(_number_bullet_lists, ("num_bullets",)),
    "detectable_format:constrained_response": _Spec(_constrained_response),
    "detectable_format:number_highlighted_sections": _Spec(_number_highlighted_sections, ("num_highlights",)),
    "detectable_format:multiple_sections": _Spec(_multiple_sections, ("section_spliter", "num_sections")),
    "detectable_format:json_format": _Spec(_json_format),
    "detectable_format:title": _Spec(_title),
    "combination:two_responses": _Spec(_two_responses),
    "combination:repeat_prompt": _Spec(_repeat_prompt, (), ("prompt_to_repeat",)),
    "startend:end_checker": _Spec(_end_checker, ("end_phrase",)),
    "startend:quotation": _Spec(_quotation),
    "change_case:capital_word_frequency": _Spec(_capital_word_frequency, ("capital_frequency", "capital_relation")),
    "change_case:english_capital": _Spec(_english_capital),
    "change_case:english_lowercase": _Spec(_english_lowercase),
    "punctuation:no_comma": _Spec(_no_comma),
}

INSTRUCTION_IDS: tuple[str, ...] = tuple(sorted(_REGISTRY))
"""Every id of the IFEval/LiveBench registry (all 25; the two data files use all of them)."""


def clean_kwargs(kwargs: dict | None) -> dict:
    """Drop ``None`` values, as LiveBench's ``read_prompt_list`` does."""
    return {k: v for k, v in (kwargs or {}).items() if v is not None}


def check_instruction(instruction_id: str, response: str, kwargs: dict | None, prompt: str = "") -> Result:
    """Strict verdict ``(followed, detail)`` for one instruction on an already-cleaned response.

    An empty (whitespace-only) response follows nothing, as in LiveBench's
    ``test_instruction_following_strict``; nor does one longer than ``MAX_CHECKED_CHARS`` (20,000
    characters), which is not read at all, so no checker's time depends on how much a program writes.
    """
    spec = _REGISTRY.get(instruction_id)
    if spec is None:
        raise UnknownInstructionError(instruction_id)
    kw = clean_kwargs(kwargs)
    unexpected = sorted(set(kw) - set(spec.required) - set(spec.optional))
    if unexpected:
        raise InstructionArgumentError(f"{instruction_id}: unexpected kwargs {unexpected}")
    missing = [name for name in spec.required if name not in kw]
    if missing:
        raise InstructionArgumentError(f"{instruction_id}: missing kwargs {missing}")
    long = too_long(response, MAX_CHECKED_CHARS)
    if long:
        return False, long + " (not checked)"
    followed, detail = spec.check(response, prompt or "", kw)
    if not response.strip():
        return False, "empty response"
    return bool(followed), detail
