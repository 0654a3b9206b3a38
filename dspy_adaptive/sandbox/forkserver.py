"""Host side of the sandbox fork server (zygote.py): start it, ask it for workers, and watch those
workers through pidfds.

A forked worker is the zygote's child, not ours, so `subprocess.Popen` cannot manage it.
`ForkedProcess` offers the part of Popen's interface the pool uses (pid, poll, wait, send_signal,
returncode): exit is observed through a pidfd that the zygote opened before it could reap the child
(Linux >= 5.3; race-free, no pid reuse), signals go through `pidfd_send_signal`, and the exit code
is asked of the zygote that forked it only when it is needed (a crash). `available()` says whether
this platform can do all that; otherwise the pool starts every worker directly (the slower path,
same confinement).

Every exchange with a zygote is bounded in time (socket timeouts on sends, a deadline on replies).
A zygote can be *rotated* (`rotate()`): the next workers come from a freshly started one (a new
address-space layout and string-hash key), while the old one forks nothing more and exits as soon
as its last worker has.
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading

import RestrictedPython

from .errors import SpecialistError

ZYGOTE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")
STARTUP_TIMEOUT = 30.0
REPLY_TIMEOUT = 10.0
UNKNOWN_EXIT = 255   # reported when the zygote is gone and a child's exit status cannot be read
MAX_PROGRAMS = 64    # programs a zygote holds (worker.load_program forgets the oldest, as the host does here)


def available() -> bool:
    return (sys.platform.startswith("linux") and hasattr(os, "pidfd_open")
            and hasattr(signal, "pidfd_send_signal") and hasattr(socket, "send_fds"))


def interpreter(script: str) -> list[str]:
    """Command line of a sandbox process: -I (no user site, no PYTHON* variables, no script dir on
    sys.path), -S (no `site`: the .pth files in site-packages -- editable-install finders, CA hooks --
    would run code in the sandbox process and cost ~20 ms of its start-up), -B (no .pyc writes). The
    scripts put RESTRICTED_PYTHON_DIR, passed as their last argument, on sys.path themselves."""
    return [sys.executable, "-I", "-S", "-B", script]


RESTRICTED_PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(RestrictedPython.__file__)))


def scrubbed_env() -> dict[str, str]:
    """The whole environment a sandbox process gets (no secrets can reach generated code)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": os.environ.get("LANG", "C.UTF-8")}


class _Zygote:
    """One running zygote process and its control socket. Not thread-safe: the ForkServer's lock guards it."""

    def __init__(self, proc: subprocess.Popen, sock: socket.socket):
        self.proc, self.sock = proc, sock
        self.ready: dict = {}
        self.retired = False
        self.loaded: tuple[str, ...] = ()   # programs its workers inherit (ForkServer.load), oldest first
        self.cfg: dict | None = None        # the workers' configuration it was last given

    def alive(self) -> bool:
        return self.sock is not None and self.proc.poll() is None

    def spawn_message(self, n: int, cfg: dict) -> dict:
        """A spawn request; the workers' configuration only when it differs from the last one sent."""
        msg: dict = {"op": "spawn", "n": int(n)}
        if cfg != self.cfg:
            msg["cfg"], self.cfg = cfg, dict(cfg)
        return msg

    def request(self, msg: dict, timeout: float = REPLY_TIMEOUT) -> tuple[dict, list[int]]:
        if self.sock is None:
            raise ConnectionError("sandbox fork server exited")
        self.sock.settimeout(timeout)
        try:
            self.sock.send(json.dumps(msg).encode("utf-8"))
        except socket.timeout:
            raise SpecialistError(f"sandbox fork server did not take a request within {timeout:g}s", "crash") from None
        return self.reply(timeout)

    def reply(self, timeout: float) -> tuple[dict, list[int]]:
        assert self.sock is not None
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            raise SpecialistError(f"sandbox fork server did not answer within {timeout:g}s", "crash")
        data, fds, _flags, _addr = socket.recv_fds(self.sock, 65536, 64)
        if not data:
            for fd in fds:
                os.close(fd)
            raise ConnectionError("sandbox fork server exited")
        return json.loads(data.decode("utf-8")), fds

    def post(self, msg: dict) -> bool:
        """A message that has no reply; False if it could not be sent."""
        if self.sock is None:
            return False
        try:
            self.sock.settimeout(1.0)
            self.sock.send(json.dumps(msg).encode("utf-8"))
            return True
        except OSError:
            return False

    def retire(self) -> None:
        """Fork nothing more; exit once every worker has (or at once, if none is running)."""
        self.retired = True
        if self.sock is not None and not self.post({"op": "retire"}):
            self.stop()

    def stop(self) -> None:
        """Close the control socket: the zygote SIGKILLs every worker it forked and exits."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def status(self, pid: int) -> int | None:
        if not self.alive():           # it cannot tell any more
            return UNKNOWN_EXIT
        try:
            reply, fds = self.request({"op": "status", "pid": pid})
        except (ConnectionError, OSError, SpecialistError, ValueError):
            return UNKNOWN_EXIT
        for fd in fds:
            os.close(fd)
        if reply.get("running"):
            return None
        rc = reply.get("returncode")
        return UNKNOWN_EXIT if rc is None else int(rc)


class ForkServer:
    """A zygote per pool, started lazily; thread-safe (requests are serialised).

    netns: ask the zygote (when the host is root) to enter empty network and IPC namespaces, which its
    workers inherit. request: {"tools", "stdout_cap", "max_predictor_calls"} of the pool, so the zygote
    builds a request's restricted globals once (worker.prebuild). After start, `ready` holds the zygote's
    report: {"probe": isolation.probe() as seen by the zygote, "netns": whether it entered the namespaces}."""

    def __init__(self, debug: bool = False, netns: bool = True, request: dict | None = None,
                 seccomp_bpf: bytes | None = None):
        self._lock = threading.Lock()
        self._z: _Zygote | None = None
        self._retired: list[_Zygote] = []
        self._debug = debug
        self._netns = netns
        self._request = request     # the pool's per-request constants: the zygote prebuilds their globals
        self._bpf = base64.b64encode(seccomp_bpf).decode("ascii") if seccomp_bpf else None
        self._closed = False
        self.ready: dict = {}
        self.rotations = 0

    # -- lifecycle ---------------------------------------------------------------------------------
    def _start_locked(self) -> None:
        host_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen(
                [*interpreter(ZYGOTE_PATH), str(zygote_end.fileno()), RESTRICTED_PYTHON_DIR,
                 json.dumps({"netns": self._netns, "request": self._request, "seccomp_bpf": self._bpf,
                             "host_pid": os.getpid()})],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=None if self._debug else subprocess.DEVNULL, env=scrubbed_env(), cwd="/",
                pass_fds=(zygote_end.fileno(),), close_fds=True, start_new_session=True)
        except BaseException:
            host_end.close()
            raise
        finally:
            zygote_end.close()
        z = _Zygote(proc, host_end)
        try:
            ready, _ = z.reply(STARTUP_TIMEOUT)
        except BaseException:
            z.stop()
            raise
        if ready.get("op") != "ready":
            z.stop()
            raise SpecialistError(f"sandbox fork server failed to start ({ready!r})", "crash")
        z.ready = ready
        self._z = z
        self.ready = ready

    def _ensure_started_locked(self) -> _Zygote:
        """(Re)start the zygote unless it is running: lazily, on prestart, after it died or was rotated."""
        if self._closed:   # e.g. a background prestart racing the pool's close(): never restart
            raise SpecialistError("sandbox fork server is closed", "crash")
        if self._z is None or not self._z.alive():
            if self._z is not None:
                self._z.stop()
                self._z = None
            self._start_locked()
        assert self._z is not None
        return self._z

    def start(self) -> None:
        """Start the zygote now unless it runs (or this server was closed); spawn() otherwise starts it
        on the first request."""
        with self._lock:
            if not self._closed:
                self._ensure_started_locked()

    def rotate(self) -> None:
        """Let the next workers come from a new zygote (fresh address-space layout and string-hash key);
        the current one retires: it forks nothing more and exits once its last worker has."""
        with self._lock:
            if self._z is not None:
                self._z.retire()
                self._retired.append(self._z)
                self._z = None
                self.rotations += 1
            self._retired = [z for z in self._retired if z.proc.poll() is None]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for z in [self._z, *self._retired]:
                if z is not None:
                    z.stop()
            self._z = None
            self._retired = []

    @property
    def pid(self) -> int | None:
        z = self._z
        return z.proc.pid if z is not None else None

    # -- requests ----------------------------------------------------------------------------------
    MAX_LOAD = 48_000   # base64 characters of code sent to the zygote in one packet

    def load(self, source_hash: str, code_b64: str) -> None:
        """Give the zygote a program's code (compiled and checked here), so workers forked from now on already
        hold it (the "template" of every request of that program: decoded once, never run by the zygote).
        Larger programs travel with each request instead."""
        z = self._z
        if len(code_b64) > self.MAX_LOAD or (z is not None and source_hash in z.loaded):
            return                    # (checked first without the lock, which a spawn may hold for a while)
        with self._lock:
            z = self._z
            if z is None or not z.alive() or source_hash in z.loaded:
                return
            if z.post({"op": "load", "hash": source_hash, "code": code_b64}):
                z.loaded = (z.loaded + (source_hash,))[-MAX_PROGRAMS:]   # the zygote forgets the oldest alike

    def spawn(self, n: int, cfg: dict) -> list[tuple["ForkedProcess", socket.socket, dict]]:
        """Fork `n` workers confined as `cfg` says; each comes back as (process, the host's end of its
        channel, {"pid", "uid", "loaded"}). The workers confine themselves and then wait, ready, for a
        request; "loaded" names the programs they hold already (`load`)."""
        with self._lock:
            z = self._ensure_started_locked()
            try:
                loaded = frozenset(z.loaded)   # what the zygote holds before this fork
                reply, fds = z.request(z.spawn_message(n, cfg))
            except (ConnectionError, OSError):   # the zygote died since the last request: restart once
                z.stop()
                self._z = None
                z = self._ensure_started_locked()
                loaded = frozenset(z.loaded)
                reply, fds = z.request(z.spawn_message(n, cfg))
        workers = reply.get("workers") if reply.get("op") == "spawned" else None
        if not isinstance(workers, list) or len(fds) != 2 * len(workers) or not workers:
            for fd in fds:
                os.close(fd)
            raise SpecialistError(f"sandbox fork server could not start a worker ({reply.get('reason')})", "crash")
        out = []
        for i, info in enumerate(workers):
            proc = ForkedProcess(int(info["pid"]), self, z, fds[2 * i])
            out.append((proc, socket.socket(fileno=fds[2 * i + 1]), dict(info, loaded=loaded)))
        return out

    def status_of(self, z: _Zygote, pid: int) -> int | None:
        if not z.alive():     # (no need to wait for the lock, which a restart may hold, to learn that)
            return UNKNOWN_EXIT
        with self._lock:
            return z.status(pid)


class ForkedProcess:
    """The subset of `subprocess.Popen` the pool uses, for a worker forked by a zygote."""

    def __init__(self, pid: int, server: ForkServer, zygote: _Zygote, pidfd: int):
        self.pid = pid
        self.returncode: int | None = None
        self._server, self._zygote = server, zygote
        self._pidfd: int | None = pidfd

    def _exited(self, timeout: float) -> bool:
        if self._pidfd is None:
            return True
        r, _, _ = select.select([self._pidfd], [], [], timeout)
        return bool(r)

    def _collect(self) -> int:
        rc = self._server.status_of(self._zygote, self.pid)   # the pidfd said it exited: not running
        self.returncode = UNKNOWN_EXIT if rc is None else rc
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None and self._exited(0):
            self._collect()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._exited(timeout if timeout is not None else 1e9):
                raise subprocess.TimeoutExpired(f"sandbox worker {self.pid}", timeout)
            self._collect()
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.returncode is None and self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass

    def discard(self) -> None:
        """SIGKILL (if still running) and drop the handle without asking the zygote for the exit code:
        the zygote reaps the child itself. For a worker whose request is over."""
        if self._pidfd is not None:
            if self.returncode is None:
                try:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                except (ProcessLookupError, OSError):
                    pass
            os.close(self._pidfd)
            self._pidfd = None
        if self.returncode is None:
            self.returncode = -signal.SIGKILL

    def __del__(self) -> None:
        if getattr(self, "_pidfd", None) is not None:
            try:
                os.close(self._pidfd)  # type: ignore[arg-type]
            except OSError:
                pass
