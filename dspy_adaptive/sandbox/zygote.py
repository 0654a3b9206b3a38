"""Sandbox fork server ("zygote"): `python -I -S -B zygote.py <control_fd> <restricted-python-dir>`.

Why: a worker started from scratch spends ~60 ms of CPU importing RestrictedPython, the allow-listed
modules and building their proxies before it can serve its first call; a search with 16 evaluation
threads starts 16 of them at once, on 2 cores. The zygote pays that once, then forks each worker
from its warmed-up image in ~2 ms. (multiprocessing's forkserver would do the forking, but it starts
its server with the host's environment -- secrets included -- and it offers no way to run our
confinement between fork and the first byte of specialist code.)

The zygote is started exactly like a worker (`-I -S -B`, environment scrubbed to PATH+LANG,
stdin/stdout/stderr on /dev/null, session of its own, only its control socket inherited) and
never runs specialist code itself. It is single-threaded, so fork() is safe. Protocol: one JSON
object per SOCK_SEQPACKET packet on the control socket.

    host -> zygote   {"op": "fork", "cfg": {...}, "scratch": dir}  + 2 fds (SCM_RIGHTS): the
                     worker's request-read and reply-write pipe ends
    zygote -> host   {"op": "forked", "pid": N}  |  {"op": "error", "reason": str}
    host -> zygote   {"op": "status", "pid": N}
    zygote -> host   {"op": "status", "pid": N, "running": bool, "returncode": int | None}

The forked child closes the control socket, starts its own session, chdirs into its scratch dir,
applies `worker.confine` (rlimits, privilege drop) and serves the two pipes -- the same state a
worker started by `worker.py` reaches, minus the import time. The zygote reaps a child only when the
host asks for its status (so a pid the host holds is never recycled under it), and exits on EOF of
the control socket, i.e. when the host goes away.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if len(sys.argv) > 2:
    sys.path.append(sys.argv[2])  # started with -S: RestrictedPython's directory, from the host

import json  # noqa: E402
import socket  # noqa: E402

import worker  # noqa: E402

MAX_PACKET = 65536


def _send(sock: socket.socket, msg: dict) -> None:
    sock.send(json.dumps(msg).encode("utf-8"))


def _child(sock: socket.socket, cfg: dict, scratch: str, fds: tuple[int, int]) -> None:
    """Runs in the forked child; never returns."""
    code = 1
    try:
        sock.close()
        os.setsid()
        os.chdir(scratch)
        worker.confine(cfg, fds)
        worker.serve(*fds)
        code = 0
    finally:
        os._exit(code)


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _fork(sock: socket.socket, msg: dict, fds: list[int]) -> dict:
    if len(fds) != 2:
        _close(fds)
        return {"op": "error", "reason": f"expected 2 file descriptors, got {len(fds)}"}
    try:
        pid = os.fork()
    except OSError as e:
        _close(fds)
        return {"op": "error", "reason": f"fork failed: {e}"}
    if pid == 0:
        _child(sock, msg["cfg"], msg["scratch"], (fds[0], fds[1]))
    _close(fds)
    return {"op": "forked", "pid": pid}


def _status(pid: int) -> dict:
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (or already reaped): its exit code is unknown
        return {"op": "status", "pid": pid, "running": False, "returncode": None}
    if got == 0:
        return {"op": "status", "pid": pid, "running": True, "returncode": None}
    return {"op": "status", "pid": pid, "running": False, "returncode": os.waitstatus_to_exitcode(status)}


def main(argv: list[str]) -> None:
    sock = socket.socket(fileno=int(argv[1]))
    worker._preimport()
    _send(sock, {"op": "ready", "pid": os.getpid()})
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_PACKET, 2)
        except OSError:
            return
        if not data:
            return  # host went away
        try:
            msg = json.loads(data.decode("utf-8"))
            op = msg.get("op")
        except Exception as e:  # noqa: BLE001
            _close(fds)
            _send(sock, {"op": "error", "reason": f"bad request: {e}"})
            continue
        if op == "fork":
            _send(sock, _fork(sock, msg, fds))
        elif op == "status":
            _send(sock, _status(int(msg["pid"])))
        else:
            _close(fds)
            _send(sock, {"op": "error", "reason": f"unknown op {op!r}"})


if __name__ == "__main__":
    main(sys.argv)
