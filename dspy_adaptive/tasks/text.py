"""Text helpers the task metrics share, each linear in the length of the text it reads.

Responses are written by programs the search cannot trust, so nothing here may take more than linear
time on any input: `remove_think_blocks` replaces `re.sub(r"<think>.*?</think>", "", text, flags=re.S)`,
which retries its lazy scan from every "<think>" and takes quadratic time on a response made of
unterminated "<think>" tags (20,000 of them cost ~10 s).
"""

from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"


def remove_think_blocks(text: str) -> str:
    """Every `<think>...</think>` block removed (from each "<think>", to the first "</think>" after it),
    exactly as the regular expression above does it."""
    out, pos = [], 0
    while (i := text.find(OPEN, pos)) >= 0:
        j = text.find(CLOSE, i + len(OPEN))
        if j < 0:
            break            # no "</think>" after this "<think>", so none after any later one either
        out.append(text[pos:i])
        pos = j + len(CLOSE)
    out.append(text[pos:])
    return "".join(out)


def too_long(text: str, limit: int, what: str = "response") -> str | None:
    """Why `text` is not read (it is longer than `limit` characters), or None."""
    if len(text) <= limit:
        return None
    return f"the {what} is {len(text):,} characters long; only {limit:,} are read"


__all__ = ["remove_think_blocks", "too_long"]
