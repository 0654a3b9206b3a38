"""Wire protocol between the host and a sandbox worker: length-prefixed JSON frames over pipes.

Frame = 4-byte big-endian length + UTF-8 JSON object. Both sides cap frame sizes; the host never
trusts a worker frame (size-checked before reading, decoded defensively).

Messages (host -> worker):  {"op": "run", ...} | {"op": "reply", "ok": bool, "value"|"error": ...} |
                            {"op": "exit"}
Messages (worker -> host):  {"op": "ready", "uid": int} | {"op": "predict", ...} | {"op": "tool", ...} |
                            {"op": "result", "outputs": {...}, "stdout": str} |
                            {"op": "error", "kind": str, "reason": str, "stdout": str, "fatal": bool}

Standalone (stdlib only): the worker imports it as a top-level module.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time

HEADER = struct.Struct(">I")


class ChannelClosed(EOFError):
    """The peer closed its end (worker crashed or host went away)."""


class FrameTooLarge(ValueError):
    pass


class RecvTimeout(TimeoutError):
    pass


def encode(msg: dict, max_bytes: int | None = None, default=None) -> bytes:
    data = json.dumps(msg, ensure_ascii=False, separators=(",", ":"), default=default).encode("utf-8")
    if max_bytes is not None and len(data) > max_bytes:
        raise FrameTooLarge(f"{len(data)} bytes > {max_bytes} bytes")
    return HEADER.pack(len(data)) + data


def send_bytes(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def send(fd: int, msg: dict, max_bytes: int | None = None) -> None:
    send_bytes(fd, encode(msg, max_bytes))


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RecvTimeout()
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                raise RecvTimeout()
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise ChannelClosed()
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(fd: int, *, timeout: float | None = None, max_bytes: int | None = None) -> dict:
    """Read one frame. timeout bounds the whole frame; max_bytes is checked before the body is read."""
    deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
    (length,) = HEADER.unpack(_read_exact(fd, HEADER.size, deadline))
    if max_bytes is not None and length > max_bytes:
        raise FrameTooLarge(f"{length} bytes > {max_bytes} bytes")
    msg = json.loads(_read_exact(fd, length, deadline).decode("utf-8"))
    if not isinstance(msg, dict):
        raise ValueError("frame is not a JSON object")
    return msg
