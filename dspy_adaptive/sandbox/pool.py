"""SandboxPool: warm worker subprocesses that run compiled specialists, thread-safe.

Each `run()` holds one worker for its duration; the pool grows lazily to `max_workers`. The
calling thread drives the whole exchange: it sends the request, then waits for worker frames;
predictor/tool RPCs are answered by calling `bridge.predict` / `bridge.tool` IN THIS THREAD (so
`dspy.settings.trace` / `dspy.context` set by the caller apply and DSPy's trace records each
predictor call). The timeout counts only time spent waiting for the worker, not the bridge.

Workers are forked from a warm zygote (forkserver.py / zygote.py: ~2 ms instead of ~60 ms of
interpreter start-up and imports each) where the platform has pidfds, else started directly.

A worker that times out, crashes, exhausts memory or breaks the protocol is SIGKILLed, reaped and
replaced lazily (next acquire spawns a fresh one). Workers are killed on close(), on garbage
collection of the pool and at interpreter exit (weakref.finalize), and exit by themselves on EOF
of their request pipe if the host dies. Scratch dirs are removed with their worker.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from . import forkserver, protocol
from .compiler import CompiledProgram, is_compiled, source_hash
from .errors import SpecialistError

WORKER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
STDOUT_CAP = 65536
STARTUP_TIMEOUT = 30.0
NOBODY = 65534


class HostBridge(Protocol):
    """Implemented by the caller (RoutedProgram); runs on the host, in the thread calling run()."""

    def predict(self, *, name: str, kind: str, signature: str, instructions: str | None,
                inputs: dict) -> dict: ...

    def tool(self, *, name: str, kwargs: dict) -> Any: ...


@dataclass(frozen=True)
class RunResult:
    outputs: dict
    stdout: str
    predictor_calls: int
    tool_calls: int
    compute_seconds: float  # host-measured wall time waiting for the worker (bridge time excluded)


def _debug() -> bool:
    return os.environ.get("DSPY_ADAPTIVE_SANDBOX_DEBUG") == "1"


class _Worker:
    def __init__(self, proc: "subprocess.Popen | forkserver.ForkedProcess", to_fd: int, from_fd: int,
                 scratch: str, uid: int):
        self.proc, self.to_fd, self.from_fd, self.scratch, self.uid = proc, to_fd, from_fd, scratch, uid
        self.known: set[str] = set()
        self.dead = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def kill(self) -> int | None:
        self.dead = True
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
            rc = self.proc.wait(timeout=5)
        except Exception:  # pragma: no cover
            rc = self.proc.returncode
        self._cleanup()
        return rc

    def stop(self) -> None:
        """Polite shutdown (exit message), then SIGKILL if needed."""
        if self.proc.poll() is None and not self.dead:
            try:
                protocol.send(self.to_fd, {"op": "exit"})
                self.proc.wait(timeout=0.5)
            except Exception:
                pass
        self.kill()

    def _cleanup(self) -> None:
        for fd in (self.to_fd, self.from_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.to_fd = self.from_fd = -1
        shutil.rmtree(self.scratch, ignore_errors=True)


def _shutdown(workers: set, lock: threading.Lock, server: "forkserver.ForkServer | None") -> None:
    with lock:
        ws = list(workers)
        workers.clear()
    for w in ws:
        w.stop()
    if server is not None:
        server.close()


def _jsonable(value: Any) -> Any:
    if hasattr(value, "toDict") and callable(value.toDict):
        value = value.toDict()
    elif isinstance(value, Mapping) and not isinstance(value, dict):
        value = dict(value)
    return json.loads(json.dumps(value, default=str))


class SandboxPool:
    """Pool of warm sandbox workers. See module docstring."""

    def __init__(self, *, max_workers: int = 4, timeout: float = 30.0, memory_mb: int = 512,
                 max_output_bytes: int = 1_000_000, max_predictor_calls: int = 100,
                 tool_names: Sequence[str] = (), max_tool_calls: int | None = None,
                 recursion_limit: int = 500, start_method: str = "auto"):
        if max_workers < 1:
            raise ValueError("max_workers must be >= 1")
        if start_method not in ("auto", "forkserver", "spawn"):
            raise ValueError(f"start_method must be 'auto', 'forkserver' or 'spawn', got {start_method!r}")
        if start_method == "forkserver" and not forkserver.available():
            raise ValueError("start_method='forkserver' needs Linux >= 5.3 (pidfd); use 'spawn' or 'auto'")
        use_fork = start_method == "forkserver" or (start_method == "auto" and forkserver.available())
        self.start_method = "forkserver" if use_fork else "spawn"
        self._forkserver = forkserver.ForkServer(debug=_debug()) if use_fork else None
        for t in tool_names:
            if not (isinstance(t, str) and t.isidentifier() and not t.startswith("_")):
                raise ValueError(f"tool name {t!r} must be a public identifier")
        self.max_workers = max_workers
        self.timeout = float(timeout)
        self.memory_mb = int(memory_mb)
        self.max_output_bytes = int(max_output_bytes)
        self.max_predictor_calls = int(max_predictor_calls)
        self.max_tool_calls = int(max_predictor_calls if max_tool_calls is None else max_tool_calls)
        self.tool_names = tuple(tool_names)
        self.recursion_limit = int(recursion_limit)
        self._cond = threading.Condition()
        self._lock = threading.Lock()          # guards _workers (shared with the finalizer)
        self._workers: set[_Worker] = set()
        self._idle: list[_Worker] = []
        self._n_live = 0                       # live + spawning
        self._closed = False
        self._counters = dict(calls=0, ok=0, errors=0, timeouts=0, crashes=0, memory=0, spawned=0,
                              respawns=0, predictor_calls=0, tool_calls=0)
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._lock, self._forkserver)

    # ------------------------------------------------------------------ public API
    @property
    def stats(self) -> dict[str, int]:
        with self._cond:
            d = dict(self._counters)
            d.update(workers=self._n_live, idle=len(self._idle))
            return d

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self._workers if w.alive()]

    def warm(self, n: int | None = None) -> None:
        """Start workers up to n (default max_workers) so first calls do not pay start-up."""
        n = self.max_workers if n is None else min(n, self.max_workers)
        ws = [self._acquire() for _ in range(n)]
        for w in ws:
            self._release(w, True)

    def prestart(self) -> None:
        """Start the fork server in the background, so the first specialist call does not wait the ~50 ms
        of its start-up (a search calls this before its seed validation, which needs no worker).
        Workers are still forked on demand: forking all of them up front cost CPU at no measured wall
        gain. A failure here is left for the first call, which restarts the server and reports."""
        if self._forkserver is not None and not self._closed:
            threading.Thread(target=self._prestart, name="sandbox-prestart", daemon=True).start()

    def _prestart(self) -> None:
        try:
            self._forkserver.start()
        except Exception:  # noqa: BLE001 - see prestart()
            pass

    def run(self, program: CompiledProgram, inputs: dict, bridge: HostBridge) -> dict[str, Any]:
        """Run program.forward(**inputs) in a warm worker; return the Prediction's fields."""
        return self.run_detailed(program, inputs, bridge).outputs

    def run_detailed(self, program: CompiledProgram, inputs: dict, bridge: HostBridge) -> RunResult:
        if not is_compiled(program):
            raise SpecialistError("program was not produced by compile_program (or fails the policy)", "policy")
        return self._execute(program.source, program.source_hash, program.class_name, inputs, bridge, True,
                             program.code)

    def _run_unchecked(self, source: str, inputs: dict, bridge: HostBridge | None = None,
                       class_name: str = "Solver") -> RunResult:
        """TEST ONLY: run source with full builtins (policy bypassed) to test the OS-level layers."""
        return self._execute(source, source_hash(source), class_name, inputs, bridge, False)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._idle.clear()
            self._cond.notify_all()
        self._finalizer()

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ workers
    def _start_process(self, fds: tuple[int, int], scratch: str, cfg: dict):
        """Fork the worker from the warm zygote, or start a fresh interpreter (start_method="spawn")."""
        if self._forkserver is not None:
            return self._forkserver.fork(fds, scratch, cfg)
        return subprocess.Popen(
            [*forkserver.interpreter(WORKER_PATH), str(fds[0]), str(fds[1]), json.dumps(cfg),
             forkserver.RESTRICTED_PYTHON_DIR],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=None if _debug() else subprocess.DEVNULL,
            env=forkserver.scrubbed_env(), cwd=scratch, pass_fds=fds, close_fds=True, start_new_session=True)

    def _spawn(self) -> _Worker:
        h2w_r, h2w_w = os.pipe()
        w2h_r, w2h_w = os.pipe()
        scratch = tempfile.mkdtemp(prefix="dspy-sandbox-")
        root = os.getuid() == 0
        try:
            if root:
                os.chown(scratch, NOBODY, NOBODY)
            os.chmod(scratch, 0o700)
            cfg = {"memory_mb": self.memory_mb, "recursion_limit": self.recursion_limit}
            proc = self._start_process((h2w_r, w2h_w), scratch, cfg)
        except BaseException:
            for fd in (h2w_r, h2w_w, w2h_r, w2h_w):
                os.close(fd)
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        os.close(h2w_r)
        os.close(w2h_w)
        w = _Worker(proc, h2w_w, w2h_r, scratch, -1)
        try:
            ready = protocol.recv(w2h_r, timeout=STARTUP_TIMEOUT, max_bytes=4096)
            if ready.get("op") != "ready":
                raise ValueError(f"unexpected first message {ready!r}")
            w.uid = int(ready.get("uid", -1))
            if root and w.uid != NOBODY:
                raise ValueError(f"worker runs as uid {w.uid}, expected {NOBODY}")
        except Exception as e:
            rc = w.kill()
            raise SpecialistError(f"worker failed to start ({type(e).__name__}: {e}; exit code {rc})", "crash") from e
        return w

    def _acquire(self) -> _Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("SandboxPool is closed")
                while self._idle:
                    w = self._idle.pop()
                    if w.alive():
                        return w
                    self._discard_locked(w)
                if self._n_live < self.max_workers:
                    self._n_live += 1
                    respawn = self._counters["spawned"] >= self.max_workers
                    break
                self._cond.wait()
        try:
            w = self._spawn()
        except BaseException:
            with self._cond:
                self._n_live -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._counters["spawned"] += 1
            self._counters["respawns"] += int(respawn)
        with self._lock:
            self._workers.add(w)
        if self._closed:
            self._release(w, False)
            raise RuntimeError("SandboxPool is closed")
        return w

    def _discard_locked(self, w: _Worker) -> None:
        self._n_live -= 1
        with self._lock:
            self._workers.discard(w)
        w.kill()

    def _release(self, w: _Worker, healthy: bool) -> None:
        if not healthy or not w.alive():
            w.kill()
        with self._cond:
            if healthy and w.alive() and not self._closed:
                self._idle.append(w)
            else:
                self._n_live -= 1
                with self._lock:
                    self._workers.discard(w)
                if not w.dead:
                    w.kill()
            self._cond.notify()

    def _count(self, key: str, n: int = 1) -> None:
        with self._cond:
            self._counters[key] += n

    # ------------------------------------------------------------------ one call
    def _execute(self, source: str, h: str, class_name: str, inputs: dict, bridge, checked: bool,
                 code: bytes = b"") -> RunResult:
        self._count("calls")
        if not isinstance(inputs, Mapping):
            raise TypeError(f"inputs must be a mapping, got {type(inputs).__name__}")
        for attempt in range(2):
            w = self._acquire()
            msg = {"op": "run", "hash": h, "class_name": class_name, "inputs": dict(inputs),
                   "checked": checked, "tools": list(self.tool_names),
                   "max_predictor_calls": self.max_predictor_calls, "max_output_bytes": self.max_output_bytes,
                   "stdout_cap": STDOUT_CAP, "cpu_budget": self.timeout}
            if h not in w.known:   # the host's compiled code when it has it, else the source to compile
                if code:
                    msg["code"] = base64.b64encode(code).decode("ascii")
                else:
                    msg["source"] = source
            try:
                protocol.send(w.to_fd, msg)
            except OSError:  # worker died while idle (nothing ran yet): retry once on a fresh one
                self._release(w, False)
                if attempt:
                    raise SpecialistError("worker crashed before the call started", "crash") from None
                continue
            break
        healthy = False
        try:
            result = self._drive(w, h, bridge)
            healthy = True
            self._count("ok")
            return result
        except SpecialistError as e:
            self._count("errors")
            healthy = w.alive()
            if e.kind in ("timeout", "crash", "memory", "protocol"):
                healthy = False
            raise
        finally:
            self._release(w, healthy)

    def _fail(self, w: _Worker, reason: str, kind: str) -> SpecialistError:
        w.kill()
        return SpecialistError(reason, kind)

    def _crash_reason(self, w: _Worker) -> SpecialistError:
        try:
            rc = w.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            rc = None
        w.kill()
        if rc is not None and rc < 0:
            sig = -rc
            if sig == signal.SIGXCPU:
                self._count("timeouts")
                return SpecialistError(f"CPU time limit exceeded (RLIMIT_CPU backstop, {self.timeout:g}s budget)", "timeout")
            self._count("crashes")
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = "?"
            return SpecialistError(f"worker crashed (signal {sig}, {name})", "crash")
        self._count("crashes")
        return SpecialistError(f"worker exited unexpectedly (exit code {rc})", "crash")

    def _drive(self, w: _Worker, h: str, bridge) -> RunResult:
        budget, spent = self.timeout, 0.0
        n_pred = n_tool = 0
        limit_hit: str | None = None
        host_exc: BaseException | None = None
        cap = self.max_output_bytes + 4 * STDOUT_CAP + 65536
        while True:
            t0 = time.monotonic()
            try:
                m = protocol.recv(w.from_fd, timeout=budget - spent, max_bytes=cap)
            except protocol.RecvTimeout:
                self._count("timeouts")
                raise self._fail(w, f"timeout after {self.timeout:g}s", "timeout") from None
            except protocol.ChannelClosed:
                raise self._crash_reason(w) from None
            except protocol.FrameTooLarge as e:
                raise self._fail(w, f"output too large (worker message {e})", "output") from None
            except Exception as e:  # undecodable frame
                raise self._fail(w, f"protocol error ({type(e).__name__}: {e})", "protocol") from None
            spent += time.monotonic() - t0
            op = m.get("op")
            if op in ("predict", "tool"):
                if op == "predict":
                    n_pred += 1
                    reply, exc, lim = self._on_predict(bridge, m, n_pred)
                else:
                    n_tool += 1
                    reply, exc, lim = self._on_tool(bridge, m, n_tool)
                host_exc = exc or host_exc
                limit_hit = limit_hit or lim
                try:
                    protocol.send(w.to_fd, reply)
                except OSError:
                    raise self._crash_reason(w) from None
                continue
            if op not in ("result", "error"):
                raise self._fail(w, f"protocol error (unexpected message {op!r})", "protocol")
            if m.get("cached"):
                w.known.add(h)
            self._count("predictor_calls", n_pred)
            self._count("tool_calls", n_tool)
            stdout = str(m.get("stdout") or "")
            if m.get("fatal"):
                w.kill()
            if m.get("limit_hit") and not limit_hit:
                limit_hit = f"predictor call limit ({self.max_predictor_calls}) exceeded"
            if limit_hit:
                raise SpecialistError(limit_hit, "predictor_limit", stdout=stdout)
            if op == "result":
                outputs = m.get("outputs")
                if not isinstance(outputs, dict):
                    raise self._fail(w, "protocol error (outputs is not an object)", "protocol")
                return RunResult(outputs, stdout, n_pred, n_tool, spent)
            kind = m.get("kind") if m.get("kind") in ("exception", "output", "policy", "protocol", "memory") else "exception"
            reason = str(m.get("reason") or "")[:4000]
            if kind == "memory":
                self._count("memory")
                reason = f"memory limit ({self.memory_mb} MB) exceeded"
            err = SpecialistError(reason or "unknown error", kind, stdout=stdout)
            if m.get("host_error") and host_exc is not None:
                raise err from host_exc
            raise err

    def _on_predict(self, bridge, m: dict, n: int):
        if n > self.max_predictor_calls:
            msg = f"predictor call limit ({self.max_predictor_calls}) exceeded"
            return {"op": "reply", "ok": False, "error": msg, "limit": True}, None, msg
        name, kind, sig, instr, inputs = (m.get(k) for k in ("name", "kind", "signature", "instructions", "inputs"))
        if (kind not in ("Predict", "ChainOfThought") or not isinstance(sig, str) or not isinstance(name, str)
                or not isinstance(inputs, dict) or not (instr is None or isinstance(instr, str))):
            return {"op": "reply", "ok": False, "error": "malformed predictor request"}, None, None
        if bridge is None:
            return {"op": "reply", "ok": False, "error": "no host bridge"}, None, None
        try:
            value = _jsonable(bridge.predict(name=name, kind=kind, signature=sig, instructions=instr, inputs=inputs))
        except Exception as e:  # surfaces in the sandbox as dspy.HostError
            return {"op": "reply", "ok": False, "error": f"{type(e).__name__}: {e}"}, e, None
        if not isinstance(value, dict):
            return {"op": "reply", "ok": False, "error": f"bridge.predict returned {type(value).__name__}, not a dict"}, None, None
        return {"op": "reply", "ok": True, "value": value}, None, None

    def _on_tool(self, bridge, m: dict, n: int):
        if n > self.max_tool_calls:
            msg = f"tool call limit ({self.max_tool_calls}) exceeded"
            return {"op": "reply", "ok": False, "error": msg, "limit": True}, None, msg
        name, kwargs = m.get("name"), m.get("kwargs")
        if name not in self.tool_names or not isinstance(kwargs, dict):
            return {"op": "reply", "ok": False, "error": f"NameError: unknown tool {name!r}"}, None, None
        if bridge is None:
            return {"op": "reply", "ok": False, "error": "no host bridge"}, None, None
        try:
            value = _jsonable(bridge.tool(name=name, kwargs=kwargs))
        except Exception as e:
            return {"op": "reply", "ok": False, "error": f"{type(e).__name__}: {e}"}, e, None
        return {"op": "reply", "ok": True, "value": value}, None, None
