"""How much of the minibatch reflection can read: a token budget sized from the reflection LM's context window.

Reflection fixes failures whose cause it must be able to read. A LiveBench-IF request states its constraints
in its last sentences, after the article; an AIME feedback carries a worked solution; a multi-hop request ends
with its question. Cutting every value to a fixed prefix removes exactly these. Instead:

* `context_window(lm)` is the reflection LM's window in tokens: a local engine's `n_ctx`, else litellm's
  model info (`max_input_tokens`, then `max_tokens`), else `DEFAULT_CONTEXT_TOKENS` (a model litellm does not
  know, e.g. a self-hosted one: pass `reflection_context_tokens=` to say what it has).
* `trace_budget(window, output_tokens, fixed_tokens)` is what the traces may take: the window less the
  answer's reserve, the rest of the prompt (instructions, contract, router, descriptions, source, history)
  and a safety margin.
* `allocate` spends a character budget across every value of the minibatch's records (requests, steps,
  outputs, errors, feedback) by weighted water-filling: short values are shown whole, long ones share what
  is left, so one 8,000-character feedback does not crowd out 23 requests.
* `shorten` keeps a value's beginning and its end, with a visible marker saying how many characters were left
  out between them, and never cuts into its protected spans.
* `request_spans` are what a request needs whatever the budget (found generically, never by task label,
  which reflection never sees): its closing part (the text after its last separator or blank line, at least
  its last sentences: where constraints and questions sit), lines that announce a question ("Question: ...")
  and its last sentence that asks one.

Token counts (`estimate_tokens`) are tiktoken's cl100k counts (shipped with litellm, offline) plus 10% for other
tokenizers, or UTF-8 bytes / 2.5 without one (`python -m benchmarks.context_budget` measures the prompts on the
four families with gpt-4.1's tokenizer against the window).
"""

from __future__ import annotations

import functools
import math
import re
import sys
from typing import Any, Sequence

from dspy_adaptive.schema import LEFT_OUT

DEFAULT_CONTEXT_TOKENS = 32_768     # a model whose window is not known (most current models have at least this)
DEFAULT_OUTPUT_TOKENS = 4_096       # the answer's reserve when the LM does not say its max_tokens
MIN_TRACE_TOKENS = 1_024            # the traces get at least this much, whatever the rest of the prompt takes
SAFETY_MARGIN = 0.05                # of the window, for the adapter's formatting and the estimate's error
TOKEN_MARGIN = 1.1                  # counts with cl100k, +10% for other tokenizers (Qwen's, o200k: within that)
BYTES_PER_TOKEN = 2.5               # the fallback estimate without a tokenizer (worked LaTeX: ~2.6 bytes/token)

#: How strongly each kind of value competes for the budget (a value of weight w gets w x the fill level).
WEIGHTS = {"input": 1.0, "feedback": 1.0, "output": 0.6, "error": 0.5, "why": 0.4, "step": 0.3}
FLOOR_CHARS = 120                   # any value keeps at least this much (or all of it, when shorter)
MARKER = LEFT_OUT                   # "[... {n} characters left out ...]"

TAIL_MIN_CHARS = 400                # a request's closing part: at least its last ~400 characters ...
TAIL_MAX_CHARS = 2_000              # ... and its whole last block when that is at most this long
QUESTION_MAX_CHARS = 600            # a question line or sentence longer than this is not protected whole
PROTECT_MAX_CHARS = 3_000           # all protected spans of one request together

_BLOCK_BREAK = re.compile(r"\n[ \t]*\n|^[ \t]*[-=_*#~]{3,}[ \t]*$", re.M)
_SENTENCE_START = re.compile(r"(?:(?<=[.!?:;])\s+|\n)(?=\S)")
_QUESTION_LINE = re.compile(r"^[ \t]*(?:question|q)[ \t]*[:.)][^\n]*", re.I | re.M)
_QUESTION_SENTENCE = re.compile(r"[^.!?\n]*\?")


# -- the window ----------------------------------------------------------------------------------------------

def context_window(lm: Any, default: int = DEFAULT_CONTEXT_TOKENS) -> int:
    """The LM's context window in tokens: a local engine's n_ctx, litellm's model info for a model litellm serves,
    else `default`. An LM with an engine of its own (a scripted or custom one) is not looked up in litellm."""
    engine = getattr(lm, "engine", None)
    n_ctx = getattr(engine, "n_ctx", None)
    if isinstance(n_ctx, int) and n_ctx > 0:
        return n_ctx
    model = getattr(lm, "model", None)
    if isinstance(model, str) and model and (engine is None or isinstance(engine, str)):   # litellm serves it
        return _litellm_window(model) or default
    return default


@functools.lru_cache(maxsize=256)
def _litellm_window(model: str) -> int | None:
    """litellm's input window of `model` (once per model and process), None when litellm does not know it --
    asked quietly: an unknown provider would otherwise print litellm's provider list on every reflection."""
    try:
        import litellm
    except ImportError:
        return None
    quiet, litellm.suppress_debug_info = litellm.suppress_debug_info, True
    try:
        info = litellm.get_model_info(model)
    except Exception:  # noqa: BLE001 - unknown to litellm (self-hosted): the default
        return None
    finally:
        litellm.suppress_debug_info = quiet
    for key in ("max_input_tokens", "max_tokens"):
        value = info.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def output_reserve(lm: Any, window: int) -> int:
    """Tokens kept for the answer: the LM's max_tokens (or `DEFAULT_OUTPUT_TOKENS`), at most half the window."""
    kwargs = getattr(lm, "kwargs", None) or {}
    value = kwargs.get("max_tokens") or kwargs.get("max_completion_tokens") or DEFAULT_OUTPUT_TOKENS
    return min(int(value), window // 2)


def trace_budget(window: int, output_tokens: int, fixed_tokens: int) -> int:
    """Tokens the traces may take: the window less the answer, the rest of the prompt and a safety margin."""
    free = window - output_tokens - fixed_tokens - int(SAFETY_MARGIN * window)
    return max(MIN_TRACE_TOKENS, free)


def _encoding() -> Any:
    """tiktoken's cl100k_base as litellm ships it (offline) when litellm is loaded -- as it is for any LM litellm
    serves; otherwise None, and counts use the byte estimate (importing litellm only to count would cost a
    process seconds)."""
    litellm = sys.modules.get("litellm")
    try:
        return litellm.encoding if litellm is not None else None
    except Exception:  # noqa: BLE001 - no tokenizer: the byte estimate
        return None


def estimate_tokens(text: str) -> int:
    """A token count on the safe side: cl100k tokens + TOKEN_MARGIN, else UTF-8 bytes / BYTES_PER_TOKEN."""
    enc = _encoding()
    if enc is not None:
        try:
            return math.ceil(len(enc.encode(text, disallowed_special=())) * TOKEN_MARGIN)
        except Exception:  # noqa: BLE001
            pass
    return math.ceil(len(text.encode("utf-8", "replace")) / BYTES_PER_TOKEN)


# -- what a request needs ------------------------------------------------------------------------------------

def _sentence_start_before(text: str, pos: int, lookback: int = 300) -> int:
    """The start of the sentence or line that contains `pos` (searched `lookback` characters back), else `pos`."""
    best = pos
    for m in _SENTENCE_START.finditer(text, max(0, pos - lookback), pos + 1):
        best = m.end() if m.end() <= pos else best
    return best


def _merge(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def request_spans(text: str) -> tuple[tuple[int, int], ...]:
    """Spans of a request that no budget may cut: its closing part, question lines and its last question.

    The closing part is the text after the request's last separator line or blank line when that is at most
    TAIL_MAX_CHARS long, and in any case at least its last TAIL_MIN_CHARS characters (from a sentence start);
    instructions and constraints that follow a quoted document, and a question that follows its context, sit
    there. Generic by design: the spans are found in the text alone."""
    n = len(text)
    if n == 0:
        return ()
    breaks = [m.end() for m in _BLOCK_BREAK.finditer(text) if text[m.end():].strip()]
    block_start = breaks[-1] if breaks else 0
    tail_start = max(0, n - TAIL_MIN_CHARS)
    if n - block_start <= TAIL_MAX_CHARS:
        tail_start = min(tail_start, block_start)
    if tail_start not in (0, block_start):
        tail_start = _sentence_start_before(text, tail_start)
    spans = [(tail_start, n)]
    for m in _QUESTION_LINE.finditer(text):
        if m.end() - m.start() <= QUESTION_MAX_CHARS:
            spans.append((m.start(), m.end()))
    questions = [m for m in _QUESTION_SENTENCE.finditer(text) if len(m.group().strip()) > 3]
    if questions and questions[-1].end() - questions[-1].start() <= QUESTION_MAX_CHARS:
        spans.append((questions[-1].start(), questions[-1].end()))
    kept, total = [], 0
    for a, b in sorted(_merge(spans), key=lambda s: -s[1]):      # the closing part first, then earlier spans
        if total + (b - a) > PROTECT_MAX_CHARS:
            a = b - (PROTECT_MAX_CHARS - total)
            if a >= b:
                break
        kept.append((a, b))
        total += b - a
    return tuple(sorted(kept))


# -- shortening ----------------------------------------------------------------------------------------------

def marker(n: int) -> str:
    return MARKER.format(n=n)


def _snap_back(text: str, pos: int, lo: int) -> int:
    """`pos` moved back to just after a space or newline, when one lies within 40 characters (and after lo)."""
    space = max(text.rfind(" ", max(lo, pos - 40), pos), text.rfind("\n", max(lo, pos - 40), pos))
    return space + 1 if space >= lo and space >= 0 else pos


def _snap_forward(text: str, pos: int, hi: int) -> int:
    for ch in (" ", "\n"):
        i = text.find(ch, pos, min(hi, pos + 40))
        if i >= 0:
            return i + 1
    return pos


def shorten(text: str, limit: int, protect: Sequence[tuple[int, int]] = ()) -> str:
    """`text` in at most about `limit` characters: its beginning, its end and every protected span, with a
    marker wherever characters were left out. Protected spans are kept whole even past `limit`."""
    n = len(text)
    if n <= limit:
        return text
    spans = _merge([(max(0, a), min(n, b)) for a, b in protect])
    reserve = len(marker(n)) + 2
    room = max(0, limit - sum(b - a for a, b in spans) - reserve * (len(spans) + 1))
    head = _snap_back(text, room - room // 2, 1) if room else 0
    tail_len = room // 2
    tail = _snap_forward(text, n - tail_len, n) if tail_len else n
    keep = _merge([(0, head)] + spans + [(tail, n)])
    parts, pos = [], 0
    for a, b in keep:
        if a > pos:
            parts.append(("\n" if parts else "") + marker(a - pos) + "\n")
        parts.append(text[a:b])
        pos = b
    if pos < n:
        parts.append(("\n" if parts else "") + marker(n - pos))
    return "".join(parts)


def protected_length(spans: Sequence[tuple[int, int]]) -> int:
    return sum(b - a for a, b in _merge(spans))


# -- spending the budget ---------------------------------------------------------------------------------------

def floor_of(kind: str, length: int, spans: Sequence[tuple[int, int]] = ()) -> int:
    """The least a value keeps: all of it when short, else FLOOR_CHARS, and never less than its protected
    spans with a little of its beginning and the markers around them."""
    floor = min(length, FLOOR_CHARS)
    if spans:
        floor = max(floor, min(length, protected_length(spans) + FLOOR_CHARS + len(marker(length)) * 2))
    return floor


def allocate(items: Sequence[tuple[str, int, int]], budget_chars: int) -> list[int]:
    """Characters for each value, given (kind, length, floor) per value and the total budget: the largest fill
    level L such that sum(min(length, max(floor, weight x L))) fits. Floors are kept even past the budget."""
    def total(level: float) -> int:
        return sum(min(n, max(f, int(WEIGHTS.get(k, 1.0) * level))) for k, n, f in items)

    if sum(n for _, n, _ in items) <= budget_chars:
        return [n for _, n, _ in items]
    lo, hi = 0.0, max((n / WEIGHTS.get(k, 1.0) for k, n, _ in items), default=0.0)
    for _ in range(48):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if total(mid) <= budget_chars else (lo, mid)
    return [min(n, max(f, int(WEIGHTS.get(k, 1.0) * lo))) for k, n, f in items]


__all__ = ["DEFAULT_CONTEXT_TOKENS", "allocate", "context_window", "estimate_tokens", "floor_of", "marker",
           "output_reserve", "request_spans", "shorten", "trace_budget"]
