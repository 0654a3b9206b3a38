"""Sandbox fork server ("zygote"): `python -I -S -B zygote.py <control_fd> <restricted-python-dir> <config-json>`.

Why: a worker started from scratch spends ~60 ms of CPU importing RestrictedPython, the allow-listed
modules and building the clean room before it can serve; every request gets a fresh worker. The
zygote pays that once, then forks workers from its warmed-up image. (multiprocessing's forkserver
would do the forking, but it starts its server with the host's environment -- secrets included --
and offers no way to run our confinement between fork and the first byte of specialist code.)

The zygote is started exactly like a worker (`-I -S -B`, environment scrubbed to PATH+LANG,
stdin/stdout/stderr on /dev/null, a session of its own, only its control socket inherited). When
the host is root and asked for it, it moves itself into empty network and IPC namespaces before
anything else, so every worker inherits them. It never runs specialist code itself and is single-
threaded, so fork() is safe. Protocol: one JSON object per SOCK_SEQPACKET packet.

    zygote -> host   {"op": "ready", "pid": N, "probe": {...}, "netns": bool}
    host -> zygote   {"op": "spawn", "n": K, "cfg": {...}}   ("cfg" may be left out: the last one given)
    zygote -> host   {"op": "spawned", "workers": [{"pid": N, "uid": U}, ...]}
                     + for each worker, its pidfd and the host's end of its channel (SCM_RIGHTS)
                     |  {"op": "error", "reason": ...}
    host -> zygote   {"op": "status", "pid": N}
    zygote -> host   {"op": "status", "pid": N, "running": bool, "returncode": int | None}
    host -> zygote   {"op": "load", "hash": H, "code": base64}   (no reply: a program's code object, which
                     workers forked from then on inherit instead of decoding it per request; never run here)
    host -> zygote   {"op": "retire"}      (no reply: fork nothing more, exit once every child has)

Each worker is forked, confines itself at once (isolation.confine) and waits, ready, for the one
request it will ever serve (so the fork and the confinement are off the request's critical path);
the zygote picks each worker's uid (root hosts: one unused by any account and by its other children).

Workers die with their host, whatever happens: the zygote watches the host through a pidfd and its
control socket, and when either says the host is gone (exit, SIGKILL, close) it SIGKILLs every child
before exiting; each worker has a parent-death signal (SIGKILL when the zygote dies) and a wall-clock
limit of its own (SIGALRM at `cfg["lifetime"]`, armed before it is confined), which the zygote also
enforces from outside. The zygote opens each child's pidfd before it can reap that child, so the
host's handle can never name a recycled pid; it reaps exited children itself (keeping their exit
codes for `status`).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if len(sys.argv) > 2:
    sys.path.append(sys.argv[2])  # started with -S: RestrictedPython's directory, from the host

import _socket  # noqa: E402
import array  # noqa: E402
import base64  # noqa: E402
import ctypes  # noqa: E402
import json  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402
from collections import OrderedDict  # noqa: E402

import isolation  # noqa: E402
import worker  # noqa: E402

MAX_PACKET = 65536
_BUF = bytearray(MAX_PACKET)
_ANC = socket.CMSG_SPACE(8 * 4)   # the host sends no descriptors; any it did are closed unread
MAX_SPAWN = 16
UID_RANGE = (1 << 30, (1 << 31) - 2)   # per-worker uids (root hosts): unused by any account
_EXITED: "OrderedDict[int, int]" = OrderedDict()   # pid -> exit code, for `status`
_RUNNING: dict[int, tuple[float, int | None]] = {}  # pid -> (deadline, uid)


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
        _RUNNING.pop(pid, None)
        _EXITED[pid] = os.waitstatus_to_exitcode(status)
        while len(_EXITED) > 10000:
            _EXITED.popitem(last=False)


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)   # not reaped yet, so the pid is still this child's
        except ProcessLookupError:
            pass


_NEXT = [float("inf")]   # the earliest lifetime among _RUNNING (no scan per packet until then)


def _expire(now: float) -> float | None:
    """SIGKILL children past their lifetime; return seconds until the next one expires (None: none)."""
    if now < _NEXT[0]:
        return None if _NEXT[0] == float("inf") else _NEXT[0] - now
    late = [pid for pid, (deadline, _) in _RUNNING.items() if deadline <= now]
    _kill(late)
    for pid in late:
        _RUNNING[pid] = (float("inf"), _RUNNING[pid][1])
    _NEXT[0] = min((d for d, _ in _RUNNING.values()), default=float("inf"))
    return None if _NEXT[0] == float("inf") else max(0.0, _NEXT[0] - now)


def _new_uid(cfg: dict) -> int | None:
    if not (cfg.get("layers", {}).get("uid", True) and os.getuid() == 0):
        return None
    lo, span = UID_RANGE[0], UID_RANGE[1] - UID_RANGE[0] + 1
    while True:
        uid = lo + int.from_bytes(os.urandom(4), "little") % span
        if all(uid != u for _, u in _RUNNING.values()):
            return uid


def _child(keep: int, cfg: dict, uid: int | None, zygote: int) -> None:
    """Runs in the forked child; never returns."""
    try:
        kept = sorted({keep, *isolation.inherited_fds()})
        low = 3
        for fd in kept:
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 1 << 16)     # the control socket, the host's pidfd, other workers' channels
        os.setsid()
        cfg = dict(cfg, uid=uid, parent=zygote)
    except BaseException:  # noqa: BLE001
        os._exit(1)
    worker.start(cfg, keep)


def _fork() -> int:
    """fork(2) itself, without Python's at-fork machinery: this process is single-threaded and holds no lock
    here, so there is nothing for that machinery to repair, and skipping it saves a third of a worker's
    start-up (the child's part that matters -- a fresh `random` state -- is redone in worker.scramble).
    Called through PyDLL, so the GIL is held across the fork exactly as os.fork() holds it."""
    if _LIBC_FORK is None:
        return os.fork()
    pid = _LIBC_FORK()
    if pid < 0:
        raise OSError(ctypes.get_errno(), "fork failed")
    return pid


try:
    _LIBC_FORK = ctypes.PyDLL(None, use_errno=True).fork if sys.platform.startswith("linux") else None
except (OSError, AttributeError):  # pragma: no cover
    _LIBC_FORK = None


def _spawn_one(cfg: dict, lifetime: float) -> tuple[dict, list[int]]:
    a, b = _socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)   # (the C objects: less to touch per fork)
    host_end, child_end = a.detach(), b.detach()
    uid = _new_uid(cfg)
    zygote = os.getpid()
    try:
        pid = _fork()
    except OSError:
        _close((host_end, child_end))
        raise
    if pid == 0:
        _child(child_end, cfg, uid, zygote)
    os.close(child_end)
    deadline = time.monotonic() + lifetime
    _RUNNING[pid] = (deadline, uid)
    if deadline < _NEXT[0]:
        _NEXT[0] = deadline
    try:
        pidfd = os.pidfd_open(pid)    # before any reaping: this handle names exactly this child
    except OSError:
        _kill([pid])
        os.close(host_end)
        raise
    return {"pid": pid, "uid": uid}, [pidfd, host_end]


_CFG: list = [None]   # the workers' configuration last given (a spawn request need not repeat it)


def _spawn(sock: socket.socket, msg: dict) -> None:
    if isinstance(msg.get("cfg"), dict):
        _CFG[0] = msg["cfg"]
    cfg, n = _CFG[0], msg.get("n", 1)
    if not isinstance(cfg, dict) or not isinstance(n, int) or not 1 <= n <= MAX_SPAWN:
        _send(sock, {"op": "error", "reason": f"expected a cfg and 1 <= n <= {MAX_SPAWN}"})
        return
    lifetime = float(cfg.get("lifetime", 3600))
    workers, fds = [], []
    try:
        for _ in range(n):
            info, pair = _spawn_one(cfg, lifetime)
            workers.append(info)
            fds.extend(pair)
    except OSError as e:
        if not workers:
            _send(sock, {"op": "error", "reason": f"fork failed: {e}"})
            return
    try:
        _send(sock, {"op": "spawned", "workers": workers}, fds)
    except OSError:
        _kill([w["pid"] for w in workers])
    finally:
        _close(fds)


def _status(pid: int) -> dict:
    _reap()
    if pid in _RUNNING:
        return {"op": "status", "pid": pid, "running": True, "returncode": None}
    return {"op": "status", "pid": pid, "running": False, "returncode": _EXITED.get(pid)}


def _host_pidfd(host: int) -> int | None:
    """A pidfd of the host (readable once it exits); None if it is already gone or pidfds are missing."""
    try:
        fd = os.pidfd_open(host)
    except (OSError, AttributeError):
        return None
    if os.getppid() != host:     # the host died before we could watch it
        os.close(fd)
        raise SystemExit(0)
    return fd


def serve(sock: socket.socket, host_fd: int | None) -> None:
    retiring = False
    watch = [sock] + ([host_fd] if host_fd is not None else [])
    while True:
        _reap()
        if retiring and not _RUNNING:
            return
        wait = _expire(time.monotonic())
        if retiring:     # (waiting for its last workers to exit: look again soon)
            wait = 0.2 if wait is None else min(wait, 0.2)
        r, _, _ = select.select(watch, [], [], wait)
        if host_fd is not None and host_fd in r:
            return   # the host exited
        if sock not in r:
            continue
        try:
            n, anc, _flags, _addr = sock.recvmsg_into([_BUF], _ANC)   # one buffer for every packet: no allocation
        except OSError:
            return
        if not n:
            return   # the host went away (or closed us)
        _close(fd for level, kind, blob in anc if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
               for fd in array.array("i", blob[: len(blob) - len(blob) % 4]))
        data = bytes(_BUF[:n])
        try:
            msg = json.loads(data.decode("utf-8"))
            op = msg.get("op")
        except Exception as e:  # noqa: BLE001
            _send(sock, {"op": "error", "reason": f"bad request: {type(e).__name__}"})
            continue
        if op == "spawn" and not retiring:
            _spawn(sock, msg)
        elif op == "status":
            _send(sock, _status(int(msg.get("pid", -1))))
        elif op == "load":      # no reply: a program's code, for the workers forked from now on
            worker.load_program(msg.get("hash"), msg.get("code"))
        elif op == "retire":
            retiring = True
        else:
            _send(sock, {"op": "error", "reason": f"unknown op {str(op)[:40]!r}"})


def main(argv: list[str]) -> None:
    sock = socket.socket(fileno=int(argv[1]))
    cfg = json.loads(argv[3]) if len(argv) > 3 else {}
    host_fd = _host_pidfd(int(cfg["host_pid"])) if cfg.get("host_pid") else None
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
    try:
        serve(sock, host_fd)
    finally:
        _kill(list(_RUNNING))        # no worker outlives its zygote, whatever ended it
        _reap()


if __name__ == "__main__":
    main(sys.argv)
