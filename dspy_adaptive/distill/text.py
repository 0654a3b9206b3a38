"""What a distilled router reads: a request's text and its tokens. Pure functions, standard library only.

The analyzers are plain functions named in the saved state (never code from a file). Training hands the same
function to scikit-learn's `TfidfVectorizer(analyzer=...)` that serving calls, so the tokens a saved
vocabulary was built from are the tokens serving produces.

Besides words, every analyzer emits a few *shape* tokens that a router's decision often turns on and that
word tokens lose: punctuation marks ("$", "?"), numbers, how the request ends, and its length as a
thermometer code (`<len>=N>` for every N on a geometric grid the length reaches), so a linear model can put
a threshold at any length.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

_WORD = re.compile(r"\w+", re.UNICODE)
_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
#: thermometer grid of request lengths (characters): 16 * 1.25^i up to ~10,000
LENGTH_GRID = tuple(int(round(16 * 1.25 ** i)) for i in range(29))
MAX_CHARS = 20_000           # a request longer than this is read up to here (tokens) / measured whole (length)


def request_text(inputs: Mapping[str, Any], input_names: Sequence[str]) -> str:
    """The text a distilled router reads: the request's input fields in `input_names` order; one field is its
    value alone, several are `name: value` lines (a field the request lacks reads as empty)."""
    values = ["" if inputs.get(n) is None else str(inputs.get(n)) for n in input_names]
    if len(values) == 1:
        return values[0]
    return "\n".join(f"{n}: {v}" for n, v in zip(input_names, values))


def shape_tokens(text: str) -> list[str]:
    """Length thermometer, how the text ends, and whether it holds numbers."""
    n = len(text)
    out = [f"<len>={g}>" for g in LENGTH_GRID if n >= g]
    stripped = text.rstrip()
    last = stripped[-1:] if stripped else ""
    out.append("<end:alnum>" if last.isalnum() else f"<end:{last or 'empty'}>")
    numbers = len(_NUMBER.findall(text[:MAX_CHARS]))
    if numbers:
        out.append("<has-number>")
    if numbers >= 3:
        out.append("<many-numbers>")
    return out


def word_tokens(text: str) -> list[str]:
    """Lower-cased words and word bigrams, each punctuation mark, then the shape tokens."""
    body = text[:MAX_CHARS].lower()
    words = _WORD.findall(body)
    out = list(words)
    out += [f"{a} {b}" for a, b in zip(words, words[1:])]
    out += _PUNCT.findall(body)
    return out + shape_tokens(text)


def char_tokens(text: str) -> list[str]:
    """Character 2- to 4-grams inside word boundaries (padded with spaces, as scikit-learn's char_wb), each
    punctuation mark, then the shape tokens: robust to inflections, typos and unseen words."""
    body = text[:MAX_CHARS].lower()
    out: list[str] = []
    for word in body.split():
        padded = f" {word} "
        for n in (2, 3, 4):
            out += [padded[i:i + n] for i in range(max(1, len(padded) - n + 1))]
    out += _PUNCT.findall(body)
    return out + shape_tokens(text)


#: the analyzers a saved distilled router may name (data names, resolved here; nothing else is accepted)
ANALYZERS: dict[str, Callable[[str], list[str]]] = {"word": word_tokens, "char": char_tokens}

__all__ = ["ANALYZERS", "LENGTH_GRID", "char_tokens", "request_text", "shape_tokens", "word_tokens"]
