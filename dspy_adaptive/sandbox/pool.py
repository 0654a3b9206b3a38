"""SandboxPool: runs compiled specialists, one fresh confined process per request; thread-safe.

Each `run()` gets a NEW worker (supply.py): forked from the pool's warm zygote (forkserver.py /
zygote.py) and fully confined ahead of time, or, where the platform lacks pidfds, started directly.
The worker serves that one request and is killed, so nothing a request leaves behind (class
registries, contexts, finalizers, patched objects) can reach another one. At most `max_workers` run
at once.

The calling thread drives the whole exchange (exchange.py) under one deadline: it sends the request,
then serves the worker's predictor and tool requests, validated by the host bridge (bridge.py), in a
helper thread carrying the caller's context. `timeout` bounds the time spent waiting for the worker
(its own compute), `call_timeout` (default: `timeout`) the whole call including the host's bridge work;
no read or write between host and worker can block past it.

A worker that times out, crashes, exhausts memory or breaks the protocol is SIGKILLed and its call
fails with a SpecialistError; every worker is killed when its request is over. The zygote is stopped
on close(), on garbage collection of the pool and at interpreter exit (weakref.finalize), and when the
host process dies it kills every worker before exiting; workers also die with the zygote and have a
wall-clock limit of their own. Workers have no scratch directory: they cannot create files at all.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import sys
import threading
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

from . import forkserver, protocol
from . import isolation as oslayers
from .bridge import BridgeLimits, BridgeRefused, PredictRequest, ToolRequest, parse_predict, to_plain
from .compiler import CompiledProgram, is_compiled
from .errors import SpecialistError
from .exchange import CRASH_SIGNALS, CallState, Exchange, LateWorker
from .layers import Layers
from .supply import Worker, WorkerSupply

STDOUT_CAP = 65536
STARTUP_TIMEOUT = 30.0
ISOLATION_MODES = ("strict", "warn")
MAX_OUTPUT_FIELDS = 64
ALL_LAYERS = Layers()
DEFAULT_LIMITS = BridgeLimits()
MAX_IDLE = 60.0            # seconds a prepared worker may wait for its request before it is replaced
ROTATE_EVERY = 5000        # workers forked from one zygote before a fresh one (new layout, new hash key) takes over
_OUTPUT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}\Z")


class HostBridge(Protocol):
    """Implemented by the caller (RoutedProgram); runs on the host, in a thread carrying the context of the
    thread calling run(). It only ever sees requests the pool has validated."""

    def predict(self, request: PredictRequest) -> Mapping[str, Any]: ...

    def tool(self, request: ToolRequest) -> Any: ...


class SandboxIsolationError(RuntimeError):
    """isolation="strict" and this host cannot apply every OS layer."""


@dataclass(frozen=True)
class Job:
    """What one worker runs: marshalled code compiled on the host, the class to instantiate, and how.
    `restricted=False` (full Python, the policy bypassed) exists only for the test doubles of
    `sandbox.testing`, which test the OS layers alone; the pool never makes such a job itself."""

    code: bytes
    class_name: str
    source_hash: str
    restricted: bool = True
    describe: bool = False
    preload: bool = False     # give the code to the zygote (a program compile_program produced)

    @classmethod
    def of(cls, program: CompiledProgram, describe: bool = False) -> "Job":
        return cls(program.code, program.class_name, program.source_hash, True, describe, True)


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


def _debug() -> bool:
    return os.environ.get("DSPY_ADAPTIVE_SANDBOX_DEBUG") == "1"


def _shutdown(live: set, lock: threading.Lock, supply: WorkerSupply, server: "forkserver.ForkServer | None") -> None:
    supply.close()
    with lock:
        ws = list(live)
        live.clear()
    for w in ws:
        w.finish()
    if server is not None:
        server.close()


class SandboxPool:
    """Runs compiled specialists in fresh confined worker processes. See module docstring.

    Args:
        max_workers: requests that may run at once.
        timeout: seconds a request may spend waiting for its worker (its compute); also its CPU limit.
        call_timeout: seconds for the whole call, the host's LM and tool calls included (default: `timeout`,
            so by default a call never takes longer than its timeout). Raise it for slow LMs.
        memory_mb: address-space limit of a worker.
        max_output_bytes: size of a worker's outputs and of one bridge request, as JSON.
        max_predictor_calls / max_tool_calls: per request.
        tool_names: the tools a specialist may call by name.
        isolation: "warn" (default: run with what this host offers, warn once about the rest) or
            "strict" (refuse to start unless every OS layer holds here; see `isolation_report()`).
        layers: which OS layers to apply (all by default). Switching layers off is for tests and
            diagnosis; "strict" refuses a pool with layers switched off.
        limits: caps on bridge requests (bridge.BridgeLimits).
        prepared: workers kept forked, confined and waiting for a request (default: max_workers, at least 2 and
            at most 8), so a call does not wait for a fork; 0 forks each worker when its call starts.
        max_idle: seconds a prepared worker may wait for its request; older ones are replaced. Every worker's
            own wall-clock limit is max_idle + call_timeout + 1 s.
    """

    def __init__(self, *, max_workers: int = 4, timeout: float = 30.0, call_timeout: float | None = None,
                 memory_mb: int = 512, max_output_bytes: int = 1_000_000, max_predictor_calls: int = 100,
                 tool_names: Sequence[str] = (), max_tool_calls: int | None = None, recursion_limit: int = 500,
                 start_method: str = "auto", isolation: str = "warn", layers: Layers = ALL_LAYERS,
                 limits: BridgeLimits = DEFAULT_LIMITS, prepared: int | None = None, max_idle: float = MAX_IDLE):
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
        if not timeout > 0 or (call_timeout is not None and not call_timeout > 0):
            raise ValueError(f"timeout and call_timeout must be positive, got {timeout!r} and {call_timeout!r}")
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
        self.call_timeout = float(call_timeout) if call_timeout is not None else self.timeout
        self.memory_mb = int(memory_mb)
        self.max_output_bytes = int(max_output_bytes)
        self.max_predictor_calls = int(max_predictor_calls)
        self.max_tool_calls = int(max_predictor_calls if max_tool_calls is None else max_tool_calls)
        self.tool_names = tuple(tool_names)
        self.recursion_limit = int(recursion_limit)
        self.stdout_cap = STDOUT_CAP
        request = {"tools": list(self.tool_names), "stdout_cap": STDOUT_CAP,
                   "max_predictor_calls": self.max_predictor_calls}
        self._bpf, self._bpf_why = oslayers.compile_seccomp() if layers.seccomp else (None, "switched off")
        self._forkserver = (forkserver.ForkServer(debug=_debug(), netns=layers.netns, request=request,
                                                  seccomp_bpf=self._bpf) if use_fork else None)
        target = min(max(max_workers, 2), 8) if prepared is None else max(0, int(prepared))
        self.max_idle = float(max_idle)
        self._supply = WorkerSupply(self._forkserver, target=target, max_idle=self.max_idle, debug=_debug(),
                                    rotate_every=ROTATE_EVERY)
        self._slots = threading.BoundedSemaphore(max_workers)
        self._lock = threading.Lock()            # guards _live and counters (shared with the finalizer)
        self._live: set[Worker] = set()
        self._closed = False
        self._report: IsolationReport | None = None
        self._report_lock = threading.Lock()
        self._cfg_lock = threading.Lock()
        self._warned = False
        self._codes: OrderedDict[str, str] = OrderedDict()   # source hash -> base64 code (the run message's)
        self._counters = dict(calls=0, ok=0, errors=0, timeouts=0, crashes=0, memory=0, violations=0,
                              predictor_calls=0, tool_calls=0, refused=0)
        self._finalizer = weakref.finalize(self, _shutdown, self._live, self._lock, self._supply, self._forkserver)

    # ------------------------------------------------------------------ public API
    @property
    def stats(self) -> dict[str, int]:
        with self._lock:
            d = dict(self._counters)
            d.update(workers=len(self._live), spawned=self._supply.spawned, prepared=self._supply.prepared())
            return d

    def worker_pids(self) -> list[int]:
        """Pids of the workers serving a request right now."""
        with self._lock:
            return [w.pid for w in self._live]

    def prepared_pids(self) -> list[int]:
        """Pids of the workers prepared for the next requests (confined, waiting; they never ran a request)."""
        return self._supply.prepared_pids()

    def prestart(self) -> None:
        """Start the fork server, measure the isolation and prepare workers in the background, so the first
        specialist call waits for none of it (a search calls this before its seed validation, which needs
        no worker). A failure here is left for the first call, which restarts the server and reports."""
        if self._forkserver is not None and not self._closed:
            threading.Thread(target=_prestart, args=(weakref.ref(self),), name="sandbox-prestart",
                             daemon=True).start()

    def warm(self, n: int | None = None) -> None:
        """Start the fork server now and begin preparing workers."""
        if self._forkserver is not None:
            self._forkserver.start()
            self._ensure_cfg()
            self._supply.prepare()

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
        return self._execute(Job.of(program), inputs, bridge)

    def describe(self, program: CompiledProgram) -> tuple[PredictRequest, ...]:
        """The predictors `program.__init__` creates, as the requests their calls would make (name, kind,
        signature, instructions; no inputs), in attribute order. Runs `__init__` only -- never `forward` -- in
        a fresh worker under the same confinement and limits as `run`, with no host bridge (a predictor or
        tool call made by `__init__` is refused). Every entry is validated like a predictor request (strict
        signature grammar, name and size caps); at most `limits.max_predictors` are returned."""
        if not is_compiled(program):
            raise SpecialistError("program was not produced by compile_program (or fails the policy)", "policy")
        result = self._execute(Job.of(program, describe=True), {}, None)
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
        """Take one worker and read the layers it reports applied (then let it go unused)."""
        try:
            w = self._take()
        except Exception:  # noqa: BLE001 - a worker that cannot start fails the first real call loudly
            return {}
        try:
            ready = w.ready if w.ready is not None else protocol.recv(w.fd, timeout=STARTUP_TIMEOUT, max_bytes=4096)
            return {k: bool(v) for k, v in (ready.get("applied") or {}).items()}
        except Exception:  # noqa: BLE001
            return {}
        finally:
            self._forget(w)

    # ------------------------------------------------------------------ workers
    def _ensure_cfg(self) -> None:
        """The workers' confinement, once the isolation probe is known (the zygote's, or this process's)."""
        if self._supply.cfg is not None:
            return
        with self._cfg_lock:
            if self._supply.cfg is not None:
                return
            if self._forkserver is not None:
                self._forkserver.start()
                probe = self._forkserver.ready.get("probe") or {}
            else:
                oslayers.set_seccomp_program(self._bpf)
                probe = oslayers.probe()
            cfg = {"memory_mb": self.memory_mb, "recursion_limit": self.recursion_limit,
                   "cpu_seconds": max(1, int(self.timeout + 1)), "layers": self.layers.to_dict(),
                   "landlock_abi": int(probe.get("landlock_abi") or 0), "seccomp": bool(probe.get("seccomp")),
                   "netns": self.layers.netns, "lifetime": self.max_idle + self.call_timeout + 1.0}
            if self._forkserver is None and self._bpf:
                cfg["seccomp_bpf"] = base64.b64encode(self._bpf).decode("ascii")
            self._supply.set_cfg(cfg)

    def _take(self) -> Worker:
        if self._closed:
            raise RuntimeError("SandboxPool is closed")
        self._ensure_cfg()
        w = self._supply.take()
        with self._lock:
            self._live.add(w)
        return w

    def _forget(self, w: Worker) -> None:
        w.finish()
        with self._lock:
            self._live.discard(w)

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counters[key] += n

    # ------------------------------------------------------------------ one call
    def _code_b64(self, job: Job) -> str:
        key = f"{job.source_hash}:{len(job.code)}:{hash(job.code)}"
        with self._lock:
            hit = self._codes.get(key)
            if hit is not None:
                self._codes.move_to_end(key)
                return hit
        text = base64.b64encode(job.code).decode("ascii")
        with self._lock:
            self._codes[key] = text
            while len(self._codes) > 64:
                self._codes.popitem(last=False)
        return text

    def _execute(self, job: Job, inputs: Mapping, bridge: HostBridge | None) -> RunResult:
        if self._closed:
            raise RuntimeError("SandboxPool is closed")
        self._count("calls")
        if not isinstance(inputs, Mapping):
            raise TypeError(f"inputs must be a mapping, got {type(inputs).__name__}")
        if self._report is None:
            self.isolation_report()       # strict mode refuses here, before any specialist code runs
        msg = {"op": "run", "hash": job.source_hash, "class_name": job.class_name, "inputs": to_plain(dict(inputs)),
               "checked": job.restricted, "tools": list(self.tool_names),
               "max_predictor_calls": self.max_predictor_calls, "max_output_bytes": self.max_output_bytes,
               "stdout_cap": STDOUT_CAP, "code": self._code_b64(job)}
        if job.describe:
            msg["describe"] = True
        if job.preload:
            msg["preloaded"] = True    # workers forked after the load hold the code: it is left out for them
        if job.preload and self._forkserver is not None:
            self._forkserver.load(job.source_hash, msg["code"])   # later workers hold it already
        with self._slots:
            st = CallState(self.timeout, self.call_timeout)
            for attempt in range(3):
                w = self._take()
                try:
                    final = Exchange(self, w, bridge, st).run(msg)
                    result = self._finish(final, st)
                    self._count("ok")
                    return result
                except LateWorker:
                    if attempt == 2:
                        raise SpecialistError("no sandbox worker could be started", "crash") from None
                except SpecialistError:
                    self._count("errors")
                    raise
                finally:
                    self._forget(w)
        raise AssertionError("unreachable")

    def _crash_reason(self, w: Worker) -> SpecialistError:
        rc = w.wait_exit(2)
        if rc is not None and rc < 0:
            sig = -rc
            if sig == signal.SIGXCPU:
                self._count("timeouts")
                return SpecialistError(f"CPU time limit exceeded (RLIMIT_CPU backstop, {self.timeout:g}s budget)",
                                       "timeout")
            if sig in CRASH_SIGNALS:   # a crash may be a probe of the address space: the next workers get a new one
                self._supply.rotate()
            self._count("crashes")
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = "?"
            return SpecialistError(f"worker crashed (signal {sig}, {name})", "crash")
        self._count("crashes")
        return SpecialistError(f"worker exited unexpectedly (exit code {rc})", "crash")

    def _check_ready(self, m: dict, w: Worker) -> None:
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

    def _finish(self, m: dict, st: CallState) -> RunResult:
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
            return RunResult(outputs, stdout, st.n_pred, st.n_tool, st.spent, tuple(st.refused))
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


def _prestart(ref: "weakref.ref[SandboxPool]") -> None:
    """prestart()'s background work, holding the pool only weakly between steps."""
    try:
        pool = ref()
        if pool is None or pool._closed:
            return
        pool._forkserver.start()
        if not pool._closed:
            pool.isolation_report()
        if not pool._closed:
            pool._ensure_cfg()
            pool._supply.prepare()
    except Exception:  # noqa: BLE001 - see prestart()
        pass
