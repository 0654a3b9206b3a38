"""Wire protocol between the host and a sandbox worker: length-prefixed JSON frames over one socket.

Frame = 4-byte big-endian length + UTF-8 JSON object. Both sides cap frame sizes; the host never
trusts a worker frame (size-checked before reading, decoded defensively).

Messages (host -> worker):  {"op": "run", ...} | {"op": "reply", "ok": bool, "value"|"error": ...}
Messages (worker -> host):  {"op": "ready", "uid": int} | {"op": "predict", ...} | {"op": "tool", ...} |
                            {"op": "result", "outputs": {...}, "stdout": str} |
                            {"op": "error", "kind": str, "reason": str, "stdout": str}

The exchange is strictly alternating: after "ready" the worker speaks only once it has read everything
the host sent. The host side never blocks past a deadline, in either direction: its end of the channel
is non-blocking, every read and every write waits at most until the call's deadline (`recv` / `send`
with `deadline=`), and `unread(fd)` says whether the worker left part of a reply unread (a protocol
violation). The worker side reads and writes plainly (blocking); the host kills it when it misbehaves.

Standalone (stdlib only): the worker imports it as a top-level module.
"""

from __future__ import annotations

import errno
import json
import os
import select
import struct
import time

HEADER = struct.Struct(">I")
_OUTQ = 0x5411   # Linux TIOCOUTQ == SIOCOUTQ: bytes of a socket's output its peer has not read yet
_AGAIN = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR)


class ChannelClosed(EOFError):
    """The peer closed its end (worker crashed or host went away)."""


class FrameTooLarge(ValueError):
    pass


class RecvTimeout(TimeoutError):
    pass


class SendTimeout(TimeoutError):
    """The peer did not read what was sent before the deadline."""


class PeerSpoke(Exception):
    """The peer sent something while the host was still sending it a message (it is not reading)."""


def encode(msg: dict, max_bytes: int | None = None, default=None) -> bytes:
    data = json.dumps(msg, ensure_ascii=False, separators=(",", ":"), default=default).encode("utf-8")
    if max_bytes is not None and len(data) > max_bytes:
        raise FrameTooLarge(f"{len(data)} bytes > {max_bytes} bytes")
    return HEADER.pack(len(data)) + data


def _left(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    return left if left > 0 else 0.0


def send_bytes(fd: int, data: bytes, deadline: float | None = None, strict: bool = False) -> None:
    """Write all of `data`. With a deadline (the host, on a non-blocking fd) wait for room at most until
    then, else raise SendTimeout; without one, write plainly (the worker). `strict`: the peer must not
    speak before it has read all of this (it then raises PeerSpoke; a peer that closed raises ChannelClosed)."""
    view = memoryview(data)
    while view:
        if deadline is not None:
            left = _left(deadline)
            r, w, _ = select.select([fd] if strict else [], [fd], [], left)
            if r:
                if not has_data(fd):
                    raise ChannelClosed()
                raise PeerSpoke()
            if not w:
                raise SendTimeout()
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            continue
        except InterruptedError:
            continue
        except BrokenPipeError:
            raise ChannelClosed() from None
        view = view[n:]


def send(fd: int, msg: dict, max_bytes: int | None = None, deadline: float | None = None,
         strict: bool = False) -> None:
    send_bytes(fd, encode(msg, max_bytes), deadline, strict)


def has_data(fd: int) -> bool:
    """Whether data (not EOF) waits on socket `fd` (host only)."""
    import socket

    try:
        with socket.socket(fileno=os.dup(fd)) as s:
            return bool(s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return False
    except OSError:
        return False


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = _left(deadline)
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                raise RecvTimeout()
        try:
            chunk = os.read(fd, min(n - got, 1 << 20))
        except OSError as e:
            if e.errno in _AGAIN:
                if deadline is None:
                    select.select([fd], [], [])
                continue
            if e.errno == errno.ECONNRESET:
                raise ChannelClosed() from None
            raise
        if not chunk:
            raise ChannelClosed()
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(fd: int, *, timeout: float | None = None, max_bytes: int | None = None,
         deadline: float | None = None) -> dict:
    """Read one frame. `deadline` (monotonic) or `timeout` bounds the whole frame; max_bytes is checked
    before the body is read."""
    if deadline is None and timeout is not None:
        deadline = time.monotonic() + max(timeout, 0.0)
    (length,) = HEADER.unpack(_read_exact(fd, HEADER.size, deadline))
    if max_bytes is not None and length > max_bytes:
        raise FrameTooLarge(f"{length} bytes > {max_bytes} bytes")
    msg = json.loads(_read_exact(fd, length, deadline).decode("utf-8"))
    if not isinstance(msg, dict):
        raise ValueError("frame is not a JSON object")
    return msg


def unread(fd: int) -> int:
    """Bytes written to `fd` (a socket) that its peer has not read yet: 0 when it read everything, -1 when
    this platform cannot tell (the host then relies on its write deadline alone). Host only."""
    import fcntl  # not in a worker's image

    try:
        return struct.unpack("i", fcntl.ioctl(fd, _OUTQ, b"\0\0\0\0"))[0]
    except OSError:
        return -1


def set_nonblocking(fd: int) -> None:
    os.set_blocking(fd, False)
