"""Sandbox fork server ("zygote"): `python -I -S -B zygote.py <control_fd> <restricted-python-dir> <config-json>`.

Why: a worker started from scratch spends ~60 ms of CPU importing RestrictedPython, the allow-listed
modules and building the clean room before it can serve; every request gets a fresh worker. The
zygote pays that once, then forks each worker from its warmed-up image in ~1-2 ms. (multiprocessing's
forkserver would do the forking, but it starts its server with the host's environment -- secrets
included -- and offers no way to run our confinement between fork and the first byte of specialist
code.)

The zygote is started exactly like a worker (`-I -S -B`, environment scrubbed to PATH+LANG,
stdin/stdout/stderr on /dev/null, a session of its own, only its control socket inherited). When
the host is root and asked for it, it moves itself into empty network and IPC namespaces before
anything else, so every worker inherits them. It never runs specialist code itself and is single-
threaded, so fork() is safe. Protocol: one JSON object per SOCK_SEQPACKET packet.

    zygote -> host   {"op": "ready", "pid": N, "probe": {...}, "netns": bool}
    host -> zygote   {"op": "fork", "cfg": {...}}  + 2 fds (SCM_RIGHTS): the worker's
                     request-read and reply-write pipe ends
    zygote -> host   {"op": "forked", "pid": N} + the child's pidfd (SCM_RIGHTS)  |  {"op": "error", ...}
    host -> zygote   {"op": "status", "pid": N}
    zygote -> host   {"op": "status", "pid": N, "running": bool, "returncode": int | None}

The zygote opens each child's pidfd before it can reap that child, so the host's handle can never
name a recycled pid; it then reaps exited children itself (keeping their exit codes for `status`),
and exits on EOF of the control socket, i.e. when the host goes away.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if len(sys.argv) > 2:
    sys.path.append(sys.argv[2])  # started with -S: RestrictedPython's directory, from the host

import base64  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
from collections import OrderedDict  # noqa: E402

import isolation  # noqa: E402
import worker  # noqa: E402

MAX_PACKET = 65536
_EXITED: "OrderedDict[int, int]" = OrderedDict()   # pid -> exit code, for `status`
_RUNNING: set[int] = set()


def _send(sock: socket.socket, msg: dict, fds: list[int] = ()) -> None:
    data = json.dumps(msg).encode("utf-8")
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def _close(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _reap() -> None:
    """Collect every exited child (never blocks)."""
    while _RUNNING:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            _RUNNING.clear()
            return
        if pid == 0:
            return
        _RUNNING.discard(pid)
        _EXITED[pid] = os.waitstatus_to_exitcode(status)
        while len(_EXITED) > 10000:
            _EXITED.popitem(last=False)


def _child(sock: socket.socket, cfg: dict, fds: tuple[int, int]) -> None:
    """Runs in the forked child; never returns."""
    try:
        sock.close()
        os.setsid()
        os.chdir("/")
    except BaseException:  # noqa: BLE001
        os._exit(1)
    worker.start(cfg, fds)


def _fork(sock: socket.socket, msg: dict, fds: list[int]) -> None:
    if len(fds) != 2 or not isinstance(msg.get("cfg"), dict):
        _close(fds)
        _send(sock, {"op": "error", "reason": f"expected a cfg and 2 file descriptors, got {len(fds)}"})
        return
    try:
        pid = os.fork()
    except OSError as e:
        _close(fds)
        _send(sock, {"op": "error", "reason": f"fork failed: {e}"})
        return
    if pid == 0:
        _child(sock, msg["cfg"], (fds[0], fds[1]))
    _RUNNING.add(pid)
    _close(fds)
    try:
        pidfd = os.pidfd_open(pid)    # before any reaping: this handle names exactly this child
    except OSError as e:
        _send(sock, {"op": "error", "reason": f"pidfd_open failed: {e}"})
        return
    try:
        _send(sock, {"op": "forked", "pid": pid}, [pidfd])
    finally:
        os.close(pidfd)


def _status(pid: int) -> dict:
    _reap()
    if pid in _RUNNING:
        return {"op": "status", "pid": pid, "running": True, "returncode": None}
    return {"op": "status", "pid": pid, "running": False, "returncode": _EXITED.get(pid)}


def main(argv: list[str]) -> None:
    sock = socket.socket(fileno=int(argv[1]))
    cfg = json.loads(argv[3]) if len(argv) > 3 else {}
    netns = False
    if cfg.get("netns") and os.getuid() == 0:
        try:
            isolation.enter_empty_netns()
            netns = True
        except OSError:
            netns = False
    isolation.set_seccomp_program(base64.b64decode(cfg["seccomp_bpf"]) if cfg.get("seccomp_bpf") else None)
    worker.preimport(cfg.get("request"))
    _send(sock, {"op": "ready", "pid": os.getpid(), "probe": isolation.probe(), "netns": netns})
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_PACKET, 2)
        except OSError:
            return
        if not data:
            return  # host went away
        _reap()
        try:
            msg = json.loads(data.decode("utf-8"))
            op = msg.get("op")
        except Exception as e:  # noqa: BLE001
            _close(fds)
            _send(sock, {"op": "error", "reason": f"bad request: {type(e).__name__}"})
            continue
        if op == "fork":
            _fork(sock, msg, fds)
        elif op == "status":
            _close(fds)
            _send(sock, _status(int(msg.get("pid", -1))))
        else:
            _close(fds)
            _send(sock, {"op": "error", "reason": f"unknown op {str(op)[:40]!r}"})


if __name__ == "__main__":
    main(sys.argv)
