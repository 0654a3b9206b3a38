"""DSPy's own types in specialist signatures, and their values across the bridge.

A specialist may declare `clock_photo: dspy.Image -> hour: int`. The grammar (signature.py) knows DSPy's types
as a fixed list of names, `DSPY_TYPE_NAMES`, spelled `dspy.Image` or `Image` (`dspy.Code['python']` with a
short language name): the name picks the class from this list, nothing is looked up by the text or evaluated.
Their values cross the bridge as plain JSON data, never as host objects:

* host -> sandbox (`serialize`): a DSPy value becomes its fields' data -- an Image `{"url": ...}` (a URL or a
  data URI), Audio `{"data": ..., "audio_format": ...}`, a History `{"messages": [...]}`, Code `{"code": ...}`,
  ToolCalls `{"tool_calls": [{"name", "args", ...}], ...}` -- inside dicts and lists too; other values are
  left as they are;
* sandbox -> host (`deserialize`): a value sent for a field declared with a DSPy type is validated into that
  type by pydantic with DSPy's own validators (an Image takes a URL or a data URI; a local path is refused:
  DSPy reads files only through `Image.from_path`), and a File carries its data inline (a provider file id,
  which would let a specialist make the host LM read any file of the account, is refused). Media a
  specialist sends is inline data (a `data:` URI) or exactly what the host sent it for this request
  (`sent_media` of the request's inputs): an image URL or a File's data naming a location (https://, gs://, a
  provider's files URL) would make the LM provider fetch it -- request data carried off in a query string to
  any web server, or a file of the account read -- while the worker itself has no network. Anything else is
  refused with a message safe to show the sandbox.
"""

from __future__ import annotations

import functools
import json
import re
import typing
from typing import Any, Mapping

import pydantic

#: DSPy's types a specialist signature may name (dspy.Tool, which holds a host function, is not one of them).
DSPY_TYPE_NAMES = ("Image", "Audio", "File", "History", "Code", "ToolCalls", "Reasoning")
#: A Code type's language: `dspy.Code['python']`.
CODE_LANGUAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9+#._-]{0,19}\Z")


class DspyValueError(ValueError):
    """A value for a DSPy-typed field that is not one. The message is ours and safe to send into the sandbox."""


@functools.cache
def _classes() -> dict[str, type]:
    import dspy

    return {name: getattr(dspy, name) for name in DSPY_TYPE_NAMES}


def dspy_type(name: str, language: str | None = None) -> type:
    """The DSPy class named `name` (one of DSPY_TYPE_NAMES); with `language`, `dspy.Code[language]`."""
    cls = _classes()[name]
    if language is None:
        return cls
    if name != "Code" or not CODE_LANGUAGE.match(language):
        raise ValueError(f"{name}[{language!r}] is not a DSPy type of the grammar")
    return _classes()["Code"][language]     # (built afresh: see _adapter)


def is_dspy_type(typ: Any) -> bool:
    """Whether `typ` is one of the grammar's DSPy types (a Code[language] included)."""
    return isinstance(typ, type) and issubclass(typ, tuple(_classes().values()))


def _is_dspy_value(value: Any) -> bool:
    return isinstance(value, tuple(_classes().values()))


def _fields(value: Any) -> Any:
    if isinstance(value, pydantic.BaseModel):
        return {name: _fields(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, dict):
        return {k: _fields(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_fields(v) for v in value]
    return value


def serialize(value: Any) -> Any:
    """`value` with every DSPy value in it (at any depth of dicts and lists) as its fields' plain data."""
    if _is_dspy_value(value):
        return _fields(value)
    if isinstance(value, dict):
        return {k: serialize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [serialize(v) for v in value]
    return value


def involves(annotation: Any) -> bool:
    """Whether a field type mentions a DSPy type (`dspy.Image`, `list[dspy.Image]`, `Optional[dspy.Code]`...)."""
    return _mentions(annotation, tuple(_classes().values()))


def _mentions(annotation: Any, classes: type | tuple[type, ...]) -> bool:
    """Whether a field type mentions one of `classes`, at any depth of its arguments."""
    if isinstance(annotation, type) and issubclass(annotation, classes):
        return True
    return any(_mentions(a, classes) for a in typing.get_args(annotation))


def _leaves(value: Any) -> list[Any]:
    """Every value inside `value` that is not a list, tuple or dict (a DSPy value is one leaf)."""
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    return [value]


def _adapter(annotation: Any) -> pydantic.TypeAdapter:
    """Built per value, never cached: the annotation is the specialist's (a Literal of its own strings, a Code
    language), and building one takes a few hundred microseconds -- with a cache shared across requests, a
    request could time whether an earlier one had used a type, and so read what that request wrote."""
    return pydantic.TypeAdapter(annotation)


def _file_ids(value: Any) -> bool:
    return any(isinstance(v, _classes()["File"]) and v.file_id is not None for v in _leaves(value))


def _locations(value: Any) -> list[str]:
    """The media locations in a (validated) value: each Image's URL and each File's data, at any depth."""
    classes = _classes()
    return [loc for v in _leaves(value)
            for loc in ([v.url] if isinstance(v, classes["Image"]) else
                        [v.file_data] if isinstance(v, classes["File"]) else [])
            if isinstance(loc, str)]


#: Inline data as DSPy writes it: `data:<type>/<subtype>[;param...];base64,<base64 only>`. Nothing looser: a
#: provider's SDK that finds "gs://" or "https://" anywhere in the string takes it for a location to fetch.
_DATA_URI = re.compile(r"data:[A-Za-z0-9.+-]+/[A-Za-z0-9.+-]+(?:;[A-Za-z0-9.+-]+=[A-Za-z0-9.+-]+)*;base64,"
                       r"[A-Za-z0-9+/]*={0,2}\Z")


def _inline(location: str) -> bool:
    return _DATA_URI.match(location) is not None


#: DSPy's own validators take super-linear time on crafted text: `dspy.Code` strips markdown fences with a
#: backtracking regex (each ``` starts a scan to the end: 255,000 backticks held the host 21 s), and
#: `dspy.ToolCalls` repairs broken JSON `arguments` with json_repair (quadratic: 12,000 characters, 14 s). So a
#: value from a specialist may hold at most MAX_FENCES fences, and a tool call's `arguments` text must be JSON
#: (parsed here, in linear time, before DSPy sees it).
MAX_FENCES = 64


def _tame(value: Any, what: str, tool_calls: bool) -> Any:
    """`value` (plain JSON from the sandbox) with each tool call's `arguments` text parsed as JSON (`tool_calls`:
    the type mentions dspy.ToolCalls); DspyValueError when that text is not JSON, or when a text holds more than
    MAX_FENCES code fences."""
    if isinstance(value, str):
        if value.count("```") > MAX_FENCES:
            raise DspyValueError(f"{what} holds more than {MAX_FENCES} code fences (```)")
        return value
    if isinstance(value, list):
        return [_tame(v, what, tool_calls) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if tool_calls and k == "arguments" and isinstance(v, str):
                try:
                    v = json.loads(v)
                except (ValueError, RecursionError):
                    raise DspyValueError(f"{what}: a tool call's arguments must be JSON text or an object") from None
            out[k] = _tame(v, what, tool_calls)
        return out
    return value


def sent_media(values: Any) -> frozenset[str]:
    """The media locations the host sends a specialist in `values` (a request's inputs) that are not inline
    data -- each DSPy media value's URL or data, and each text as given (a URL passed as text for a field
    the program declares `dspy.Image`): the only ones it may send back for this request (module docstring)."""
    texts = [v for v in _leaves(values) if isinstance(v, str)]
    return frozenset(loc for loc in _locations(values) + texts if not _inline(loc))


def deserialize(annotation: Any, value: Any, *, what: str, sent: frozenset[str] = frozenset()) -> Any:
    """`value`, sent from the sandbox for a field declared `annotation`, as DSPy's type (see the module
    docstring); unchanged when the type mentions no DSPy type. DspyValueError when it is not one, or when
    it names media by a location (a URL) other than those in `sent` (`sent_media` of the request's inputs)."""
    if not involves(annotation):
        return value
    try:
        tamed = _tame(value, what, _mentions(annotation, _classes()["ToolCalls"]))
        typed = _adapter(annotation).validate_python(tamed)
    except DspyValueError:
        raise
    except (pydantic.ValidationError, ValueError, TypeError, RecursionError):
        raise DspyValueError(f"{what} is not a valid {type_text(annotation)}: send the value as the field data "
                             "it was received in (an image as {\"url\": <URL or data URI>})") from None
    if _file_ids(typed):
        raise DspyValueError(f"{what}: a dspy.File from a specialist carries its data inline, not a file_id")
    if any(not _inline(loc) and loc not in sent for loc in _locations(typed)):
        raise DspyValueError(f"{what}: media from a specialist is inline data (a data: URI) or passed on exactly "
                             "as this request received it; a URL of its own is refused (the LM provider would "
                             "fetch it)")
    return typed


def field_types(values: Mapping[str, Any]) -> dict[str, str]:
    """{field: "dspy.Image"} for the values of `values` that are DSPy values (a request's inputs)."""
    return {name: type_text(type(v)) for name, v in values.items() if _is_dspy_value(v)}


def type_text(annotation: Any) -> str:
    """How the grammar spells a DSPy class (`dspy.Image`; a `dspy.Code[...]` class as `dspy.Code`)."""
    if isinstance(annotation, type):
        for name, cls in _classes().items():
            if issubclass(annotation, cls):
                return f"dspy.{name}"
    return getattr(annotation, "__name__", None) or str(annotation)


__all__ = ["CODE_LANGUAGE", "DSPY_TYPE_NAMES", "DspyValueError", "deserialize", "dspy_type", "field_types",
           "involves", "sent_media", "serialize"]
