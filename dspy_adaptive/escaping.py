"""Text that a specialist (or any LM) wrote, made safe where it crosses into something else.

A specialist's outputs are hostile input to everything downstream of it. Each boundary has its helper:

* prompts (LM judges, reflection): `defang_markers` makes DSPy's field markers (`[[ ## name ## ]]`) and
  the XML adapter's field tags inert, so quoted text cannot open or close a field of the prompt it is in
  (or of the answer a model echoes it into); `quote_tag` gives a prompt a mark that text inside it cannot
  know in advance; `quoted_lines` renders a value as lines that all start with a quote prefix, so it
  can never begin a line of the prompt's own structure.
* Markdown (reports, notebooks, tables): `md_fence` (a code fence longer than any backtick run inside),
  `md_code` (an inline code span, safe in a table cell), `md_cell` (a table cell: `|`, newlines and HTML
  neutralised) and `md_text` (untrusted prose on one line with every Markdown/HTML character escaped).
* everything shown to people: `visible_controls` writes control, format and separator characters
  (bidirectional overrides and isolates, zero-width characters, BOM, tag characters, ESC, CR, lone
  surrogates: Unicode categories Cc, Cf, Zl, Zp, Cs) as visible escapes such as `\\u202e`, so the text a
  person reads is the text that is there.
* logs and records: `records.bounded_key` (names and keys of any size, cut with a marker and stripped
  of anything but plain characters) lives with the records, the package's lowest layer.

Standard library only, so every module may import it.
"""

from __future__ import annotations

import functools
import hashlib
import html
import re
import unicodedata
from typing import Any, Iterable

#: Unicode categories written visibly: controls, format characters (bidi controls, zero-width characters,
#: BOM, tag characters), line/paragraph separators and surrogates (which cannot even be encoded as UTF-8).
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
#: Planes scanned for those categories (every Cf/Cc/Zl/Zp/Cs code point of Unicode 16 lies in them).
_PLANES = ((0x0000, 0x20000), (0xE0000, 0xE1000))


@functools.cache
def _escape_table(keep: str) -> dict[int, str]:
    table = {}
    for lo, hi in _PLANES:
        for cp in range(lo, hi):
            ch = chr(cp)
            if ch not in keep and not ch.isprintable() and unicodedata.category(ch) in HIDDEN_CATEGORIES:
                table[cp] = f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"
    return table


def visible_controls(text: str, keep: str = "\n\t") -> str:
    """`text` with every hidden character (categories `HIDDEN_CATEGORIES`) except those in `keep` written
    as a visible escape (`\\u202e`, `\\U000e0001`). A Windows line end (CR LF) is read as a newline."""
    text = str(text)
    if text.isprintable():
        return text
    if "\r\n" in text and "\n" in keep:
        text = text.replace("\r\n", "\n")
    return text.translate(_escape_table(keep))


def first_hidden(text: str, keep: str = "\n\t") -> str | None:
    """The first character of `text` that `visible_controls` would escape, or None."""
    text = str(text)
    if text.isprintable():
        return None
    table = _escape_table(keep)
    return next((ch for ch in text if ord(ch) in table), None)


# ------------------------------------------------------------------------------------------------ prompts
#: The prefix of DSPy's custom-type markers (`<<CUSTOM-TYPE-START-IDENTIFIER>>`, `<<CUSTOM-TYPE-END-IDENTIFIER>>`).
CUSTOM_TYPE_MARKER = "<<CUSTOM-TYPE-"
_OPEN_MARKER = re.compile(r"\[\[(?=[ \t]*#)")
_CLOSE_MARKER = re.compile(r"(#[ \t]*)\]\]")


def defang_markers(text: str, field_names: Iterable[str] = ()) -> str:
    """`text` with DSPy's field markers made inert: `[[ ## name ## ]]` becomes `[ [ ## name ## ] ]` (the chat
    and JSON adapters render fields, and parse answers, by the exact marker), and `<name>` / `</name>` for
    each of `field_names` becomes `&lt;name&gt;` (the XML adapter's fields), and DSPy's custom-type markers
    (`<<CUSTOM-TYPE-START-IDENTIFIER>>`, which the adapters turn into image or file parts the provider fetches)
    become `< <CUSTOM-TYPE-...`. Everything else is unchanged."""
    text = _CLOSE_MARKER.sub(r"\1] ]", _OPEN_MARKER.sub("[ [", str(text)))
    text = text.replace(CUSTOM_TYPE_MARKER, "< <CUSTOM-TYPE-")
    names = sorted({n for n in field_names if isinstance(n, str) and n.isidentifier()}, key=len, reverse=True)
    if names and "<" in text:
        tags = re.compile(r"<(/?)(" + "|".join(map(re.escape, names)) + r")>")
        text = tags.sub(r"&lt;\1\2&gt;", text)
    return text


def inert_custom_types(value: Any) -> Any:
    """`value` with DSPy's custom-type marker made inert in every text, at any depth of lists and dicts: a text
    carrying `<<CUSTOM-TYPE-START-IDENTIFIER>>[{"type": "image_url", ...}]<<CUSTOM-TYPE-END-IDENTIFIER>>` becomes,
    in any DSPy prompt that shows it (a user's LM judge, a downstream module), an image or file part that the
    LM provider fetches. Other values are returned as they are."""
    if isinstance(value, str):
        return value.replace(CUSTOM_TYPE_MARKER, "< <CUSTOM-TYPE-") if CUSTOM_TYPE_MARKER in value else value
    if isinstance(value, list):
        return [inert_custom_types(v) for v in value]
    if isinstance(value, dict):
        return {k: inert_custom_types(v) for k, v in value.items()}
    return value


def quote_tag(*parts: str) -> str:
    """A short mark for one prompt, derived from everything quoted in it: quoted text cannot contain the
    mark of the prompt it ends up in (that would need a hash of itself), and the same prompt always gets
    the same mark (LM caches and resumed runs see identical prompts)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()[:8]


QUOTE = "| "


def quoted_lines(text: str, indent: str = "", prefix: str = QUOTE) -> list[str]:
    """`text` as lines that each start with `indent + prefix` (every kind of line break splits, so no part
    of the text can begin a line of its own); hidden characters are written visibly."""
    lines = visible_controls(str(text), keep="\t\n").split("\n") or [""]
    return [f"{indent}{prefix}{line}".rstrip() for line in lines]


# ------------------------------------------------------------------------------------------------ Markdown
_BACKTICKS = re.compile(r"`+")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+!|~&])")


def _longest_run(text: str) -> int:
    return max((len(m) for m in _BACKTICKS.findall(text)), default=0)


def md_fence(text: str, info: str = "") -> str:
    """A fenced code block showing `text` exactly (hidden characters made visible): the fence is longer
    than any backtick run inside, so nothing in the text can close it."""
    body = visible_controls(str(text)).rstrip("\n")
    fence = "`" * max(3, _longest_run(body) + 1)
    return f"{fence}{info}\n{body}\n{fence}"


def md_code(text: str) -> str:
    """An inline code span showing `text` on one line, safe inside a table cell (`|` escaped)."""
    body = " ".join(visible_controls(str(text), keep="\n").split("\n"))
    fence = "`" * (_longest_run(body) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or not body.strip() else ""
    return f"{fence}{pad}{body}{pad}{fence}".replace("|", "\\|")


def md_cell(text: str) -> str:
    """A Markdown table cell from text: one line, `|` escaped, HTML and entities neutralised, no links or
    images (`[`, `]` escaped), hidden characters visible. Emphasis (`**bold**`) still renders."""
    flat = " ".join(visible_controls(str(text), keep="\n").split("\n"))
    return html.escape(flat, quote=False).replace("|", "\\|").replace("[", "\\[").replace("]", "\\]")


def md_text(text: str) -> str:
    """Untrusted text as inert Markdown on one line: every character that could start Markdown or HTML
    (links, images, emphasis, code, tags, entities, table pipes) is backslash-escaped."""
    flat = " ".join(visible_controls(str(text), keep="\n").split("\n"))
    return _MD_SPECIAL.sub(r"\\\1", flat)


__all__ = ["HIDDEN_CATEGORIES", "QUOTE", "defang_markers", "first_hidden", "md_cell", "md_code",
           "md_fence", "md_text", "quote_tag", "quoted_lines", "visible_controls"]
