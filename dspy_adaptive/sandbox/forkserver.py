"""Host side of the sandbox fork server (zygote.py): start it, ask it to fork workers, and watch
those workers through pidfds.

A forked worker is the zygote's child, not ours, so `subprocess.Popen` cannot manage it.
`ForkedProcess` offers the part of Popen's interface the pool uses (pid, poll, wait, send_signal,
returncode): exit is observed through a pidfd that the zygote opened before it could reap the child
(Linux >= 5.3; race-free, no pid reuse), signals go through `pidfd_send_signal`, and the exit code
is asked of the zygote only when it is needed (a crash). `available()` says whether this platform
can do all that; otherwise the pool starts every worker directly (the slower path, same confinement).
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


class ForkServer:
    """One zygote per pool, started lazily; thread-safe (requests are serialised).

    netns: ask the zygote (when the host is root) to enter empty network and IPC namespaces, which its
    workers inherit. request: {"tools", "stdout_cap", "max_predictor_calls"} of the pool, so the zygote
    builds a request's restricted globals once (worker.prebuild). After start, `ready` holds the zygote's
    report: {"probe": isolation.probe() as seen
    by the zygote, "netns": whether it entered the namespaces}."""

    def __init__(self, debug: bool = False, netns: bool = True, request: dict | None = None,
                 seccomp_bpf: bytes | None = None):
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._debug = debug
        self._netns = netns
        self._request = request     # the pool's per-request constants: the zygote prebuilds their globals
        self._bpf = base64.b64encode(seccomp_bpf).decode("ascii") if seccomp_bpf else None
        self._closed = False
        self.ready: dict = {}

    # -- lifecycle ---------------------------------------------------------------------------------
    def _start_locked(self) -> None:
        host_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [*interpreter(ZYGOTE_PATH), str(zygote_end.fileno()), RESTRICTED_PYTHON_DIR,
                 json.dumps({"netns": self._netns, "request": self._request, "seccomp_bpf": self._bpf})],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=None if self._debug else subprocess.DEVNULL, env=scrubbed_env(), cwd="/",
                pass_fds=(zygote_end.fileno(),), close_fds=True, start_new_session=True)
        except BaseException:
            host_end.close()
            raise
        finally:
            zygote_end.close()
        self._sock = host_end
        ready, _ = self._reply_locked(STARTUP_TIMEOUT)
        if ready.get("op") != "ready":
            self._stop_locked()
            raise SpecialistError(f"sandbox fork server failed to start ({ready!r})", "crash")
        self.ready = ready

    def _stop_locked(self) -> None:
        if self._sock is not None:
            self._sock.close()        # the zygote exits on EOF
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def start(self) -> None:
        """Start the zygote now unless it runs (or this server was closed); fork() otherwise starts it
        on the first request."""
        with self._lock:
            if not self._closed:
                self._ensure_started_locked()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._stop_locked()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # -- requests ----------------------------------------------------------------------------------
    def _reply_locked(self, timeout: float) -> tuple[dict, list[int]]:
        assert self._sock is not None
        r, _, _ = select.select([self._sock], [], [], timeout)
        if not r:
            raise SpecialistError(f"sandbox fork server did not answer within {timeout:g}s", "crash")
        data, fds, _flags, _addr = socket.recv_fds(self._sock, 65536, 1)
        if not data:
            for fd in fds:
                os.close(fd)
            raise ConnectionError("sandbox fork server exited")
        return json.loads(data.decode("utf-8")), fds

    def _ensure_started_locked(self) -> None:
        """(Re)start the zygote unless it is running: lazily, on prestart, or after it died."""
        if not self._alive_locked():
            self._stop_locked()
            self._start_locked()

    def _alive_locked(self) -> bool:
        return self._sock is not None and self._proc is not None and self._proc.poll() is None

    def _request_locked(self, msg: dict, fds: tuple[int, ...] = ()) -> tuple[dict, list[int]]:
        if self._closed:   # e.g. a background prestart racing the pool's close(): never restart
            raise SpecialistError("sandbox fork server is closed", "crash")
        data = json.dumps(msg).encode("utf-8")
        self._ensure_started_locked()
        assert self._sock is not None
        socket.send_fds(self._sock, [data], list(fds)) if fds else self._sock.send(data)
        return self._reply_locked(REPLY_TIMEOUT)

    def fork(self, fds: tuple[int, int], cfg: dict) -> "ForkedProcess":
        """Fork a worker that serves `fds` (its request-read and reply-write ends), confined as `cfg` says."""
        msg = {"op": "fork", "cfg": cfg}
        with self._lock:
            try:
                reply, pidfds = self._request_locked(msg, fds)
            except (ConnectionError, OSError):   # the zygote died since the last request: restart once
                self._stop_locked()
                reply, pidfds = self._request_locked(msg, fds)
        if reply.get("op") != "forked" or len(pidfds) != 1:
            for fd in pidfds:
                os.close(fd)
            raise SpecialistError(f"sandbox fork server could not start a worker ({reply.get('reason')})", "crash")
        return ForkedProcess(int(reply["pid"]), self, pidfds[0])

    def status(self, pid: int) -> int | None:
        """A child's return code (Popen's convention: None while it runs); reaps it if it has exited.
        UNKNOWN_EXIT when the zygote cannot tell (it died, or the child is not its own)."""
        with self._lock:
            if not self._alive_locked():   # a new zygote would not know this child
                return UNKNOWN_EXIT
            try:
                reply, fds = self._request_locked({"op": "status", "pid": pid})
            except (ConnectionError, OSError, SpecialistError):
                return UNKNOWN_EXIT
            for fd in fds:
                os.close(fd)
        if reply.get("running"):
            return None
        rc = reply.get("returncode")
        return UNKNOWN_EXIT if rc is None else int(rc)


class ForkedProcess:
    """The subset of `subprocess.Popen` the pool uses, for a worker forked by the zygote."""

    def __init__(self, pid: int, server: ForkServer, pidfd: int):
        self.pid = pid
        self.returncode: int | None = None
        self._server = server
        self._pidfd: int | None = pidfd

    def _exited(self, timeout: float) -> bool:
        if self._pidfd is None:
            return True
        r, _, _ = select.select([self._pidfd], [], [], timeout)
        return bool(r)

    def _collect(self) -> int:
        rc = self._server.status(self.pid)     # the pidfd said it exited, so it is not running
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
