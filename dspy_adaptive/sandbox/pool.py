"""SandboxPool: runs compiled specialists, one fresh confined process per request; thread-safe.

Each `run()` gets a NEW worker, forked from the warm zygote (forkserver.py / zygote.py, ~1-2 ms) or,
where the platform lacks pidfds, started directly. The worker serves that one request and exits, so
nothing a request leaves behind (class registries, contexts, finalizers, patched objects) can reach
another one. At most `max_workers` run at once.

The calling thread drives the whole exchange: it sends the request, then waits for worker frames.
Predictor and tool requests are validated by the host bridge (bridge.py: strict signature grammar,
declared inputs only, plain JSON, caps) and only then served by `bridge.predict` / `bridge.tool` IN
THIS THREAD (so `dspy.settings.trace` / `dspy.context` set by the caller apply and DSPy's trace
records each predictor call). Two clocks bound a call: `timeout` counts the time spent waiting for
the worker (its own compute), `call_timeout` the whole call including the host's bridge work.

A worker that times out, crashes, exhausts memory or breaks the protocol is SIGKILLed; every worker
is killed when its request is over. The zygote is stopped on close(), on garbage collection of the
pool and at interpreter exit (weakref.finalize), and exits by itself if the host dies; workers exit
on EOF of their request pipe. Workers have no scratch directory: they cannot create files at all.
"""

from __future__ import annotations

import base64
import json
import marshal
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

from . import forkserver, policy, protocol
from . import isolation as oslayers
from .bridge import (
    BridgeLimits,
    BridgeRefused,
    PredictRequest,
    ToolRequest,
    json_size,
    parse_predict,
    parse_tool,
    sandbox_error_text,
    to_plain,
)
from .compiler import CompiledProgram, is_compiled, source_hash
from .errors import SpecialistError
from .layers import Layers

WORKER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
STDOUT_CAP = 65536
STARTUP_TIMEOUT = 30.0
NOBODY = 65534
UID_RANGE = (1 << 30, (1 << 31) - 2)   # per-worker uids (root hosts): unused by any account
ISOLATION_MODES = ("strict", "warn")
MAX_OUTPUT_FIELDS = 64
ALL_LAYERS = Layers()
DEFAULT_LIMITS = BridgeLimits()
_OUTPUT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}\Z")


class HostBridge(Protocol):
    """Implemented by the caller (RoutedProgram); runs on the host, in the thread calling run().
    It only ever sees requests the pool has validated."""

    def predict(self, request: PredictRequest) -> Mapping[str, Any]: ...

    def tool(self, request: ToolRequest) -> Any: ...


class SandboxIsolationError(RuntimeError):
    """isolation="strict" and this host cannot apply every OS layer."""


@dataclass(frozen=True)
class RunResult:
    outputs: dict
    stdout: str
    predictor_calls: int
    tool_calls: int
    compute_seconds: float          # host-measured wall time waiting for the worker (bridge time excluded)
    refused: tuple[str, ...] = ()   # bridge requests refused during the call (reasons)


@dataclass(frozen=True)
class IsolationReport:
    """What confines this pool's workers, measured: `available` is what the host offers, `requested`
    what the pool applies, `applied` what the first worker confirmed, `missing` every layer that does
    not hold here with the reason."""

    platform: str
    root: bool
    mode: str
    requested: dict[str, bool]
    available: dict[str, bool]
    applied: dict[str, bool] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    landlock_abi: int = 0

    @property
    def complete(self) -> bool:
        return not self.missing

    def to_dict(self) -> dict[str, Any]:
        return {"platform": self.platform, "root": self.root, "mode": self.mode, "requested": dict(self.requested),
                "available": dict(self.available), "applied": dict(self.applied), "missing": dict(self.missing),
                "landlock_abi": self.landlock_abi}

    def summary(self) -> str:
        on = [k for k, v in self.available.items() if v and self.requested.get(k, True)]
        s = f"sandbox isolation on {self.platform} ({'root' if self.root else 'user'}): {', '.join(on) or 'none'}"
        if self.missing:
            s += "; NOT enforced: " + "; ".join(f"{k} ({v})" for k, v in self.missing.items())
        return s


def _compile_for_test(source: str, checked: bool) -> bytes:
    """Test-only paths without a CompiledProgram: RestrictedPython's compile without our static policy
    (checked), or a plain compile with full Python (unchecked). Done here, on the host, like every compile."""
    if checked:
        code, errors = policy.restricted_compile(source)
        if code is None:
            raise SpecialistError("does not compile: " + "; ".join(errors), "policy")
    else:
        code = compile(source, policy.FILENAME, "exec", dont_inherit=True)
    return marshal.dumps(code)


def _debug() -> bool:
    return os.environ.get("DSPY_ADAPTIVE_SANDBOX_DEBUG") == "1"


class _Worker:
    def __init__(self, proc: "subprocess.Popen | forkserver.ForkedProcess", to_fd: int, from_fd: int, uid: int):
        self.proc, self.to_fd, self.from_fd, self.uid = proc, to_fd, from_fd, uid

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def finish(self) -> None:
        """Kill the worker (its request is over) and release everything it held."""
        for fd in (self.to_fd, self.from_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.to_fd = self.from_fd = -1
        if isinstance(self.proc, forkserver.ForkedProcess):
            self.proc.discard()
        else:
            try:
                if self.proc.poll() is None:
                    self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(timeout=5)
            except Exception:  # noqa: BLE001 - pragma: no cover
                pass


def _shutdown(live: set, lock: threading.Lock, server: "forkserver.ForkServer | None") -> None:
    with lock:
        ws = list(live)
        live.clear()
    for w in ws:
        w.finish()
    if server is not None:
        server.close()


class _CallState:
    """Bookkeeping of one call: bridge requests served and refused, distinct predictors, clocks."""

    def __init__(self, call_timeout: float):
        self.deadline = time.monotonic() + call_timeout
        self.n_pred = self.n_tool = 0
        self.defs: set[tuple] = set()
        self.refused: list[str] = []
        self.limit_hit: str | None = None
        self.host_exc: BaseException | None = None


class SandboxPool:
    """Runs compiled specialists in fresh confined worker processes. See module docstring.

    Args:
        max_workers: requests that may run at once.
        timeout: seconds a request may spend in its worker (compute), bridge time excluded.
        call_timeout: seconds for the whole call, the host's LM and tool calls included
            (default: max(600, timeout)).
        memory_mb: address-space limit of a worker.
        max_output_bytes: size of a worker's outputs and of one bridge request, as JSON.
        max_predictor_calls / max_tool_calls: per request.
        tool_names: the tools a specialist may call by name.
        isolation: "warn" (default: run with what this host offers, warn once about the rest) or
            "strict" (refuse to start unless every OS layer holds here; see `isolation_report()`).
        layers: which OS layers to apply (all by default). Switching layers off is for tests and
            diagnosis; "strict" refuses a pool with layers switched off.
        limits: caps on bridge requests (bridge.BridgeLimits).
    """

    def __init__(self, *, max_workers: int = 4, timeout: float = 30.0, call_timeout: float | None = None,
                 memory_mb: int = 512, max_output_bytes: int = 1_000_000, max_predictor_calls: int = 100,
                 tool_names: Sequence[str] = (), max_tool_calls: int | None = None, recursion_limit: int = 500,
                 start_method: str = "auto", isolation: str = "warn", layers: Layers = ALL_LAYERS,
                 limits: BridgeLimits = DEFAULT_LIMITS):
        if max_workers < 1:
            raise ValueError("max_workers must be >= 1")
        self._settings = dict(max_workers=max_workers, timeout=timeout, call_timeout=call_timeout,
                              memory_mb=memory_mb, max_output_bytes=max_output_bytes,
                              max_predictor_calls=max_predictor_calls, tool_names=tuple(tool_names),
                              max_tool_calls=max_tool_calls, recursion_limit=recursion_limit, start_method=start_method,
                              isolation=isolation, layers=layers, limits=limits)
        if start_method not in ("auto", "forkserver", "spawn"):
            raise ValueError(f"start_method must be 'auto', 'forkserver' or 'spawn', got {start_method!r}")
        if isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {isolation!r}")
        if start_method == "forkserver" and not forkserver.available():
            raise ValueError("start_method='forkserver' needs Linux >= 5.3 (pidfd); use 'spawn' or 'auto'")
        for t in tool_names:
            if not (isinstance(t, str) and t.isidentifier() and not t.startswith("_")):
                raise ValueError(f"tool name {t!r} must be a public identifier")
        use_fork = start_method == "forkserver" or (start_method == "auto" and forkserver.available())
        self.start_method = "forkserver" if use_fork else "spawn"
        self.layers = layers
        self.isolation = isolation
        self.limits = limits
        self.max_workers = max_workers
        self.timeout = float(timeout)
        self.call_timeout = float(call_timeout) if call_timeout is not None else max(600.0, self.timeout)
        self.memory_mb = int(memory_mb)
        self.max_output_bytes = int(max_output_bytes)
        self.max_predictor_calls = int(max_predictor_calls)
        self.max_tool_calls = int(max_predictor_calls if max_tool_calls is None else max_tool_calls)
        self.tool_names = tuple(tool_names)
        self.recursion_limit = int(recursion_limit)
        request = {"tools": list(self.tool_names), "stdout_cap": STDOUT_CAP,
                   "max_predictor_calls": self.max_predictor_calls}
        self._bpf, self._bpf_why = oslayers.compile_seccomp() if layers.seccomp else (None, "switched off")
        self._forkserver = (forkserver.ForkServer(debug=_debug(), netns=layers.netns, request=request,
                                                  seccomp_bpf=self._bpf) if use_fork else None)
        self._slots = threading.BoundedSemaphore(max_workers)
        self._lock = threading.Lock()            # guards _live and counters (shared with the finalizer)
        self._live: set[_Worker] = set()
        self._uids: set[int] = set()
        self._closed = False
        self._report: IsolationReport | None = None
        self._report_lock = threading.Lock()
        self._warned = False
        self._counters = dict(calls=0, ok=0, errors=0, timeouts=0, crashes=0, memory=0, spawned=0,
                              predictor_calls=0, tool_calls=0, refused=0)
        self._finalizer = weakref.finalize(self, _shutdown, self._live, self._lock, self._forkserver)

    # ------------------------------------------------------------------ public API
    @property
    def stats(self) -> dict[str, int]:
        with self._lock:
            d = dict(self._counters)
            d.update(workers=len(self._live))
            return d

    def worker_pids(self) -> list[int]:
        """Pids of the workers serving a request right now."""
        with self._lock:
            return [w.pid for w in self._live]

    def prestart(self) -> None:
        """Start the fork server and measure the isolation in the background, so the first specialist call
        does not wait for them (a search calls this before its seed validation, which needs no worker). A
        failure here is left for the first call, which restarts the server and reports."""
        if self._forkserver is not None and not self._closed:
            threading.Thread(target=self._prestart, name="sandbox-prestart", daemon=True).start()

    def _prestart(self) -> None:
        try:
            self._forkserver.start()
            if not self._closed:
                self.isolation_report()
        except Exception:  # noqa: BLE001 - see prestart()
            pass

    def warm(self, n: int | None = None) -> None:
        """Start the fork server now (workers are per request, so there is nothing else to warm)."""
        if self._forkserver is not None:
            self._forkserver.start()

    def isolation_report(self) -> IsolationReport:
        """Which OS layers hold for this pool's workers, measured by starting one (cached). In "strict"
        mode raises SandboxIsolationError if any does not; in "warn" mode warns once."""
        with self._report_lock:
            if self._report is None:
                self._report = self._measure_isolation()
            report = self._report
        if report.missing:
            if self.isolation == "strict":
                raise SandboxIsolationError(
                    "isolation='strict' but these sandbox layers do not hold on this host: "
                    + "; ".join(f"{k}: {v}" for k, v in report.missing.items())
                    + ". Run on Linux >= 5.13 with Landlock and libseccomp (as root for per-worker uids and an "
                      "empty network namespace), or use isolation='warn' to accept the weaker sandbox.")
            if not self._warned:
                self._warned = True
                warnings.warn(report.summary(), RuntimeWarning, stacklevel=2)
        return report

    def run(self, program: CompiledProgram, inputs: dict, bridge: HostBridge) -> dict[str, Any]:
        """Run program.forward(**inputs) in a fresh worker; return the Prediction's fields."""
        return self.run_detailed(program, inputs, bridge).outputs

    def run_detailed(self, program: CompiledProgram, inputs: dict, bridge: HostBridge) -> RunResult:
        if not is_compiled(program):
            raise SpecialistError("program was not produced by compile_program (or fails the policy)", "policy")
        return self._execute(program.source, program.source_hash, program.class_name, inputs, bridge, True,
                             program.code)

    def describe(self, program: CompiledProgram) -> tuple[PredictRequest, ...]:
        """The predictors `program.__init__` creates, as the requests their calls would make (name, kind,
        signature, instructions; no inputs), in attribute order. Runs `__init__` only -- never `forward` -- in
        a fresh worker under the same confinement and limits as `run`, with no host bridge (a predictor or
        tool call made by `__init__` is refused). Every entry is validated like a predictor request (strict
        signature grammar, name and size caps); at most `limits.max_predictors` are returned."""
        if not is_compiled(program):
            raise SpecialistError("program was not produced by compile_program (or fails the policy)", "policy")
        result = self._execute(program.source, program.source_hash, program.class_name, {}, None, True,
                               program.code, describe=True)
        found = result.outputs.get("predictors")
        if not isinstance(found, list):
            raise SpecialistError("protocol error (no predictor list)", "protocol")
        out: list[PredictRequest] = []
        for entry in found[: self.limits.max_predictors]:
            if not (isinstance(entry, list) and len(entry) == 4):
                raise SpecialistError("protocol error (malformed predictor entry)", "protocol")
            name, kind, signature, instructions = entry
            try:
                out.append(parse_predict({"name": name, "kind": kind, "signature": signature,
                                          "instructions": instructions, "inputs": {}}, self.limits))
            except BridgeRefused as e:
                raise SpecialistError(f"predictor refused: {e}", "policy") from None
        return tuple(out)

    def _run_unchecked(self, source: str, inputs: dict, bridge: HostBridge | None = None,
                       class_name: str = "Solver") -> RunResult:
        """TEST ONLY: run source with full builtins (policy bypassed) to test the other layers alone."""
        return self._execute(source, source_hash(source), class_name, inputs, bridge, False)

    def close(self) -> None:
        self._closed = True
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._closed

    def renewed(self) -> "SandboxPool":
        """A new, open pool with this pool's settings (for a program still holding this one after it closed)."""
        return SandboxPool(**self._settings)

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ isolation
    def _available(self) -> tuple[dict[str, Any], bool]:
        if self._forkserver is not None:
            self._forkserver.start()
            ready = self._forkserver.ready
            return ready.get("probe") or {}, bool(ready.get("netns"))
        oslayers.set_seccomp_program(self._bpf)
        probe = oslayers.probe()
        return probe, bool(probe.get("netns"))

    def _measure_isolation(self) -> IsolationReport:
        probe, netns = self._available()
        root = hasattr(os, "getuid") and os.getuid() == 0
        available = {"rlimits": sys.platform != "win32", "uid": bool(probe.get("uid")),
                     "landlock": int(probe.get("landlock_abi") or 0) > 0, "seccomp": bool(probe.get("seccomp")),
                     "netns": netns}
        requested = self.layers.to_dict()
        reasons = dict(probe.get("reasons") or {})
        if self.layers.netns and not netns and "netns" not in reasons:
            reasons["netns"] = "the fork server could not enter an empty network namespace"
        applied = self._confirm_layers() if not self._closed else {}
        missing = {}
        for k, want in requested.items():
            if not want:
                missing[k] = "switched off for this pool"
            elif not available.get(k):
                missing[k] = reasons.get(k, "unavailable on this host")
        abi = int(probe.get("landlock_abi") or 0)
        if available["landlock"] and abi < 4 and requested["landlock"]:
            missing.setdefault("landlock_net", f"Landlock ABI {abi} has no network rights (needs >= 4)")
        return IsolationReport(sys.platform, root, self.isolation, requested, available, applied, missing, abi)

    def _confirm_layers(self) -> dict[str, bool]:
        """Start one worker and read the layers it reports applied (then let it go unused)."""
        w = self._start_worker()
        try:
            ready = protocol.recv(w.from_fd, timeout=STARTUP_TIMEOUT, max_bytes=4096)
            return {k: bool(v) for k, v in (ready.get("applied") or {}).items()}
        except Exception:  # noqa: BLE001 - a worker that cannot start fails the first real call loudly
            return {}
        finally:
            self._forget(w)

    # ------------------------------------------------------------------ workers
    def _worker_cfg(self, uid: int | None) -> dict:
        if self._forkserver is not None:
            probe = self._forkserver.ready.get("probe") or {}
        else:
            oslayers.set_seccomp_program(self._bpf)
            probe = oslayers.probe()
        cfg = {"memory_mb": self.memory_mb, "recursion_limit": self.recursion_limit,
               "cpu_seconds": max(1, int(self.timeout + 1)), "uid": uid, "layers": self.layers.to_dict(),
               "landlock_abi": int(probe.get("landlock_abi") or 0), "seccomp": bool(probe.get("seccomp")),
               "netns": self.layers.netns}
        if self._forkserver is None and self._bpf:
            cfg["seccomp_bpf"] = base64.b64encode(self._bpf).decode("ascii")
        return cfg

    def _new_uid(self) -> int | None:
        if not (self.layers.uid and os.getuid() == 0):
            return None
        with self._lock:
            while True:
                uid = random.randint(*UID_RANGE)
                if uid not in self._uids:
                    self._uids.add(uid)
                    return uid

    def _start_worker(self) -> _Worker:
        if self._closed:
            raise RuntimeError("SandboxPool is closed")
        h2w_r, h2w_w = os.pipe()
        w2h_r, w2h_w = os.pipe()
        uid = self._new_uid()
        try:
            if self._forkserver is not None:
                self._forkserver.start()
                proc = self._forkserver.fork((h2w_r, w2h_w), self._worker_cfg(uid))
            else:
                proc = subprocess.Popen(
                    [*forkserver.interpreter(WORKER_PATH), str(h2w_r), str(w2h_w), json.dumps(self._worker_cfg(uid)),
                     forkserver.RESTRICTED_PYTHON_DIR],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=None if _debug() else subprocess.DEVNULL, env=forkserver.scrubbed_env(), cwd="/",
                    pass_fds=(h2w_r, w2h_w), close_fds=True, start_new_session=True)
        except BaseException:
            for fd in (h2w_r, h2w_w, w2h_r, w2h_w):
                os.close(fd)
            self._release_uid(uid)
            raise
        os.close(h2w_r)
        os.close(w2h_w)
        w = _Worker(proc, h2w_w, w2h_r, uid if uid is not None else os.getuid())
        with self._lock:
            self._live.add(w)
            self._counters["spawned"] += 1
        return w

    def _release_uid(self, uid: int | None) -> None:
        if uid is not None:
            with self._lock:
                self._uids.discard(uid)

    def _forget(self, w: _Worker) -> None:
        w.finish()
        with self._lock:
            self._live.discard(w)
            self._uids.discard(w.uid)

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counters[key] += n

    # ------------------------------------------------------------------ one call
    def _execute(self, source: str, h: str, class_name: str, inputs: dict, bridge, checked: bool,
                 code: bytes = b"", describe: bool = False) -> RunResult:
        if self._closed:
            raise RuntimeError("SandboxPool is closed")
        self._count("calls")
        if not isinstance(inputs, Mapping):
            raise TypeError(f"inputs must be a mapping, got {type(inputs).__name__}")
        if self._report is None:
            self.isolation_report()       # strict mode refuses here, before any specialist code runs
        msg = {"op": "run", "hash": h, "class_name": class_name, "inputs": to_plain(dict(inputs)),
               "checked": checked, "tools": list(self.tool_names), "max_predictor_calls": self.max_predictor_calls,
               "max_output_bytes": self.max_output_bytes, "stdout_cap": STDOUT_CAP}
        if describe:
            msg["describe"] = True
        msg["code"] = base64.b64encode(code or _compile_for_test(source, checked)).decode("ascii")
        with self._slots:
            w = self._start_worker()
            try:
                try:
                    protocol.send(w.to_fd, msg)
                except OSError:
                    raise self._crash_reason(w) from None
                result = self._drive(w, bridge)
                self._count("ok")
                return result
            except SpecialistError:
                self._count("errors")
                raise
            finally:
                self._forget(w)

    def _crash_reason(self, w: _Worker) -> SpecialistError:
        rc = w.wait_exit(2)
        if rc is not None and rc < 0:
            sig = -rc
            if sig == signal.SIGXCPU:
                self._count("timeouts")
                return SpecialistError(f"CPU time limit exceeded (RLIMIT_CPU backstop, {self.timeout:g}s budget)",
                                       "timeout")
            self._count("crashes")
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = "?"
            return SpecialistError(f"worker crashed (signal {sig}, {name})", "crash")
        self._count("crashes")
        return SpecialistError(f"worker exited unexpectedly (exit code {rc})", "crash")

    def _recv(self, w: _Worker, budget: float, cap: int) -> dict:
        try:
            return protocol.recv(w.from_fd, timeout=budget, max_bytes=cap)
        except protocol.RecvTimeout:
            self._count("timeouts")
            raise SpecialistError(f"timeout after {self.timeout:g}s", "timeout") from None
        except protocol.ChannelClosed:
            raise self._crash_reason(w) from None
        except protocol.FrameTooLarge as e:
            raise SpecialistError(f"output too large (worker message {e})", "output") from None
        except Exception as e:  # noqa: BLE001 - undecodable frame
            raise SpecialistError(f"protocol error ({type(e).__name__})", "protocol") from None

    def _check_ready(self, m: dict, w: _Worker) -> None:
        if m.get("op") != "ready":
            raise SpecialistError("protocol error (worker did not start)", "protocol")
        if os.getuid() == 0 and self.layers.uid and m.get("uid") != w.uid:
            raise SpecialistError(f"worker runs as uid {m.get('uid')!r}, expected {w.uid}", "crash")
        applied = m.get("applied") or {}
        wanted = [k for k in ("rlimits", "uid", "landlock", "seccomp")
                  if getattr(self.layers, k) and self._report is not None and self._report.available.get(k)]
        missing = [k for k in wanted if not applied.get(k)]
        if missing:
            raise SpecialistError(f"worker did not apply isolation layers {missing}", "crash")

    def _drive(self, w: _Worker, bridge) -> RunResult:
        st = _CallState(self.call_timeout)
        spent = 0.0
        cap = self.max_output_bytes + 4 * STDOUT_CAP + 65536
        started = False
        while True:
            budget = min(self.timeout - spent, st.deadline - time.monotonic())
            if budget <= 0:
                self._count("timeouts")
                raise SpecialistError(f"timeout after {self.timeout:g}s" if spent >= self.timeout else
                                      f"call timeout after {self.call_timeout:g}s (bridge time included)", "timeout")
            t0 = time.monotonic()
            m = self._recv(w, budget, cap)
            spent += time.monotonic() - t0
            op = m.get("op")
            if not started:
                self._check_ready(m, w)
                started = True
                continue
            if op in ("predict", "tool"):
                reply = self._serve(bridge, m, st)
                try:
                    protocol.send(w.to_fd, reply)
                except OSError:
                    raise self._crash_reason(w) from None
                if time.monotonic() > st.deadline:
                    self._count("timeouts")
                    raise SpecialistError(f"call timeout after {self.call_timeout:g}s (bridge time included)",
                                          "timeout")
                continue
            if op not in ("result", "error"):
                raise SpecialistError("protocol error (unexpected message)", "protocol")
            return self._finish(m, st, spent)

    def _finish(self, m: dict, st: _CallState, spent: float) -> RunResult:
        self._count("predictor_calls", st.n_pred)
        self._count("tool_calls", st.n_tool)
        stdout = str(m.get("stdout") or "")[: 2 * STDOUT_CAP]
        if m.get("limit_hit") and not st.limit_hit:
            st.limit_hit = f"predictor call limit ({self.max_predictor_calls}) exceeded"
        if st.limit_hit:
            raise SpecialistError(st.limit_hit, "predictor_limit", stdout=stdout)
        if m.get("op") == "result":
            outputs = m.get("outputs")
            if not isinstance(outputs, dict):
                raise SpecialistError("protocol error (outputs is not an object)", "protocol")
            bad = [k for k in outputs if not _OUTPUT_NAME.match(k)]
            if bad or len(outputs) > MAX_OUTPUT_FIELDS:
                raise SpecialistError(
                    f"output field names must be plain identifiers (at most {MAX_OUTPUT_FIELDS}); got "
                    f"{len(outputs)} fields{', e.g. ' + repr(bad[0][:40]) if bad else ''}", "output")
            return RunResult(outputs, stdout, st.n_pred, st.n_tool, spent, tuple(st.refused))
        kind = m.get("kind")
        if kind not in ("exception", "output", "policy", "protocol", "memory"):
            kind = "exception"
        reason = str(m.get("reason") or "")[:4000]
        if kind == "memory":
            self._count("memory")
            reason = f"memory limit ({self.memory_mb} MB) exceeded"
        if st.refused and kind == "exception":
            reason += f" [host refused: {st.refused[-1][:300]}]"
        elif st.host_exc is not None and m.get("host_error"):
            reason += f" [host: {type(st.host_exc).__name__}: {str(st.host_exc)[:300]}]"
        err = SpecialistError(reason or "unknown error", kind, stdout=stdout)
        if m.get("host_error") and st.host_exc is not None:
            raise err from st.host_exc
        raise err

    # ------------------------------------------------------------------ bridge requests
    def _refuse(self, st: _CallState, reason: str) -> dict:
        st.refused.append(reason)
        self._count("refused")
        return {"op": "reply", "ok": False, "error": reason}

    def _limit(self, st: _CallState, reason: str) -> dict:
        st.limit_hit = st.limit_hit or reason
        return {"op": "reply", "ok": False, "error": reason, "limit": True}

    def _serve(self, bridge, m: dict, st: _CallState) -> dict:
        if m.get("op") == "predict":
            st.n_pred += 1
            if st.n_pred > self.max_predictor_calls:
                return self._limit(st, f"predictor call limit ({self.max_predictor_calls}) exceeded")
            try:
                req = parse_predict(m, self.limits)
            except BridgeRefused as e:
                return self._refuse(st, str(e))
            st.defs.add(req.key)
            if len(st.defs) > self.limits.max_predictors:
                return self._limit(st, f"more than {self.limits.max_predictors} distinct predictors in one call")
            return self._call(bridge, lambda: self._predict(bridge, req), st, f"predictor {req.name!r}")
        st.n_tool += 1
        if st.n_tool > self.max_tool_calls:
            return self._limit(st, f"tool call limit ({self.max_tool_calls}) exceeded")
        try:
            treq = parse_tool(m, self.tool_names, self.limits)
        except BridgeRefused as e:
            return self._refuse(st, str(e))
        return self._call(bridge, lambda: self._tool(bridge, treq), st, f"tool {treq.name!r}")

    def _call(self, bridge, fn, st: _CallState, what: str) -> dict:
        if bridge is None:
            return self._refuse(st, f"{what}: no host bridge")
        if time.monotonic() > st.deadline:
            return self._limit(st, f"call timeout after {self.call_timeout:g}s (bridge time included)")
        try:
            value = fn()
        except BridgeRefused as e:
            return self._refuse(st, str(e))
        except Exception as e:  # noqa: BLE001 - surfaces in the sandbox as dspy.HostError, our words only
            st.host_exc = e
            return {"op": "reply", "ok": False, "error": sandbox_error_text(e, what)}
        return {"op": "reply", "ok": True, "value": value}

    def _predict(self, bridge, req: PredictRequest) -> dict:
        raw = bridge.predict(req)
        if not isinstance(raw, Mapping):
            raise BridgeRefused(f"predictor {req.name!r} produced no fields")
        names = req.signature.output_names + (("reasoning",) if req.kind == "ChainOfThought" else ())
        out = to_plain({k: raw[k] for k in names if k in raw})
        if json_size(out) > self.max_output_bytes:
            raise BridgeRefused(f"predictor {req.name!r} answered more than {self.max_output_bytes} bytes")
        return out

    def _tool(self, bridge, req: ToolRequest) -> Any:
        value = to_plain(bridge.tool(req))
        if json_size(value) > self.limits.max_result_bytes:
            raise BridgeRefused(f"tool {req.name!r} returned more than {self.limits.max_result_bytes} bytes")
        return value
