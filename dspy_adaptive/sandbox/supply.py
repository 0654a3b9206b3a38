"""Single-use sandbox workers, prepared ahead of the requests they will serve.

A worker is forked from the pool's zygote, confines itself completely (isolation.confine) and then
waits, "ready", for the one request it will ever serve; afterwards it is killed. `WorkerSupply` keeps
a few such workers prepared (`target`) and replaces the ones taken, in a background thread, so the fork
and the confinement are off the request's critical path. It replaces them a batch at a time (`batch`: a
quarter of a worker's cost here is the zygote's per-request overhead -- a fork-server round trip, the
descriptors passed back -- which one request for several workers pays once: `python -m
dspy_adaptive.sandbox.bench` and `benchmarks.perf` report the CPU per worker). Nothing crosses from one
request to another: a prepared worker has never run request code, and every request gets its own.

A prepared worker that waited too long (`max_idle`), or died meanwhile, is discarded rather than used;
every worker also carries a wall-clock limit of its own (`lifetime`, enforced by itself and by the
zygote) so that none outlives its purpose even if the host is stopped.

Where the platform has no pidfds (`forkserver.available()` is False) every worker is a freshly started
interpreter, started on demand (the slower path, same confinement).
"""

from __future__ import annotations

import collections
import json
import os
import random
import socket
import subprocess
import threading
import time
from typing import Any

from . import forkserver, protocol

READY_TIMEOUT = 10.0   # seconds a prepared worker may take to confine itself and say it is ready
MAX_BATCH = 4          # workers asked of the zygote at once when refilling (at most half the target)
WORKER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
UID_RANGE = (1 << 30, (1 << 31) - 2)   # per-worker uids (root hosts): unused by any account (as zygote.py)


class Worker:
    """One single-use worker: its process, the host's end of its channel (non-blocking), its uid."""

    def __init__(self, proc: "subprocess.Popen | forkserver.ForkedProcess", sock: socket.socket, uid: int,
                 born: float, prepared: bool, loaded: frozenset[str] = frozenset()):
        self.proc, self.sock, self.uid, self.born, self.prepared = proc, sock, uid, born, prepared
        self.loaded = loaded              # programs it holds already (forkserver.load)
        self.ready: dict | None = None    # its "ready" message, once read
        sock.setblocking(False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def fd(self) -> int:
        return self.sock.fileno()

    def alive(self) -> bool:
        try:
            return self.proc.poll() is None
        except Exception:  # noqa: BLE001 - a handle that cannot tell is not worth using
            return False

    def usable(self, max_idle: float) -> bool:
        """Alive, not waiting longer than max_idle, and not forked by a zygote that was since retired."""
        zygote = getattr(self.proc, "_zygote", None)
        return (time.monotonic() - self.born <= max_idle and not getattr(zygote, "retired", False)
                and self.alive())

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def finish(self) -> None:
        """Kill the worker (its request is over, or it was never used) and release what it held."""
        try:
            self.sock.close()
        except OSError:
            pass
        if isinstance(self.proc, forkserver.ForkedProcess):
            self.proc.discard()
        else:
            try:
                if self.proc.poll() is None:
                    self.proc.kill()
                self.proc.wait(timeout=5)
            except Exception:  # noqa: BLE001 - pragma: no cover
                pass


class WorkerSupply:
    """Hands out single-use workers; keeps `target` of them prepared when a fork server is available.

    Holds no reference to the pool (its thread must not keep the pool alive). `cfg` is the workers'
    confinement (isolation.confine's config, without the uid the zygote picks); `set_cfg` gives it once
    the isolation probe is known."""

    def __init__(self, server: "forkserver.ForkServer | None", *, target: int, max_idle: float,
                 debug: bool = False, rotate_every: int = 0):
        self.server = server
        self.target = target if server is not None else 0
        self.batch = max(1, min(MAX_BATCH, self.target // 2))   # refill once this many have been taken
        self.max_idle = max_idle
        self.debug = debug
        self.rotate_every = rotate_every
        self.cfg: dict[str, Any] | None = None
        self.spawned = 0
        self._since_rotation = 0
        self._ready: collections.deque[Worker] = collections.deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._failures = 0

    def set_cfg(self, cfg: dict[str, Any]) -> None:
        with self._cond:
            self.cfg = dict(cfg)

    # -- taking ----------------------------------------------------------------------------------------
    def take(self) -> Worker:
        """A worker for one request: a prepared one if there is a usable one, else a new one now."""
        while True:
            with self._cond:
                w = self._ready.popleft() if self._ready else None
                self._cond.notify_all()          # the refill thread replaces it
            if w is None:
                break
            if w.usable(self.max_idle):
                self._start_thread()
                return w
            w.finish()
        self._start_thread()
        first, *extra = self.new(self.batch)     # none prepared: a batch now, the rest for the next requests
        if extra:                                # (batch is 1 without a fork server: nothing is prepared then)
            with self._cond:
                keep = not self._closed
                if keep:
                    self._ready.extend(extra)
            if not keep:
                for w in extra:
                    w.finish()
        return first

    def new(self, n: int) -> list[Worker]:
        """Start `n` workers now, in this thread."""
        if self.cfg is None:
            raise RuntimeError("the worker supply has no configuration yet")
        if self.server is None:
            return [self._spawn_direct(self.cfg) for _ in range(n)]
        self._maybe_rotate(n)
        out = []
        now = time.monotonic()
        for proc, sock, info in self.server.spawn(n, self.cfg):
            uid = info.get("uid")
            out.append(Worker(proc, sock, os.getuid() if uid is None else int(uid), now, True, info["loaded"]))
        with self._cond:
            self.spawned += len(out)
        return out

    def _maybe_rotate(self, n: int) -> None:
        if self.rotate_every and self._since_rotation >= self.rotate_every:
            self.rotate()
        self._since_rotation += n

    def rotate(self) -> None:
        """Workers from now on come from a new zygote (fresh layout and string-hash key); the prepared
        ones, forked from the old one, are discarded."""
        if self.server is None:
            return
        self._since_rotation = 0
        self.server.rotate()
        self.flush()

    def flush(self) -> None:
        with self._cond:
            old = list(self._ready)
            self._ready.clear()
            self._cond.notify_all()
        for w in old:
            w.finish()

    def _spawn_direct(self, cfg: dict[str, Any]) -> Worker:
        host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        uid = None
        if (cfg.get("layers") or {}).get("uid", True) and os.getuid() == 0:
            uid = random.randint(*UID_RANGE)
        try:
            cfg = dict(cfg, parent=os.getpid(), uid=uid)
            proc = subprocess.Popen(
                [*forkserver.interpreter(WORKER_PATH), str(child_end.fileno()), json.dumps(cfg),
                 forkserver.RESTRICTED_PYTHON_DIR],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=None if self.debug else subprocess.DEVNULL, env=forkserver.scrubbed_env(), cwd="/",
                pass_fds=(child_end.fileno(),), close_fds=True, start_new_session=True)
        except BaseException:
            host_end.close()
            raise
        finally:
            child_end.close()
        with self._cond:
            self.spawned += 1
        return Worker(proc, host_end, int(cfg["uid"]) if cfg.get("uid") is not None else os.getuid(),
                      time.monotonic(), False)

    # -- preparing ahead ---------------------------------------------------------------------------------
    def prepared(self) -> int:
        with self._cond:
            return len(self._ready)

    def prepared_pids(self) -> list[int]:
        with self._cond:
            return [w.pid for w in self._ready]

    def prepare(self) -> None:
        """Start the refill thread (it prepares `target` workers, then `batch` more whenever that many have
        been taken)."""
        self._start_thread()

    def _start_thread(self) -> None:
        if self.target <= 0 or self._closed:
            return
        with self._cond:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._refill, name="sandbox-supply", daemon=True)
            self._thread.start()

    def _refill(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (self.cfg is None or len(self._ready) > self.target - self.batch):
                    self._cond.wait(timeout=self.max_idle)
                    self._drop_stale_locked()
                if self._closed:
                    return
                need = self.target - len(self._ready)
            try:
                fresh = [w for w in self.new(need) if _read_ready(w)]
                self._failures = 0
            except Exception:  # noqa: BLE001 - a request will start its own worker and report the problem
                self._failures += 1
                time.sleep(min(5.0, 0.05 * 2 ** self._failures))
                continue
            with self._cond:
                if self._closed:
                    stale = fresh
                else:     # (a rotation may have retired their zygote while they were being made)
                    stale = [w for w in fresh if not w.usable(self.max_idle)]
                    self._ready.extend(w for w in fresh if w not in stale)
            for w in stale:
                w.finish()

    def _drop_stale_locked(self) -> None:
        now = time.monotonic()
        keep = [w for w in self._ready if now - w.born <= self.max_idle]
        if len(keep) != len(self._ready):
            for w in self._ready:
                if w not in keep:
                    w.finish()
            self._ready = collections.deque(keep)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            old = list(self._ready)
            self._ready.clear()
            self._cond.notify_all()
        for w in old:
            w.finish()


def _read_ready(w: Worker) -> bool:
    """Read a fresh worker's "ready" message now (off any request's path); a worker that does not say it
    is ready in time, or says something else, is discarded."""
    try:
        m = protocol.recv(w.fd, timeout=READY_TIMEOUT, max_bytes=4096)
    except Exception:  # noqa: BLE001
        m = None
    if not (isinstance(m, dict) and m.get("op") == "ready"):
        w.finish()
        return False
    w.ready = m
    return True

