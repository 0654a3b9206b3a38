"""One call's exchange with its worker, under one deadline.

The calling thread drives it: it reads the worker's "ready", sends the request, then serves the
worker's predictor and tool requests until the worker answers. Two clocks bound it:

* `timeout`: the time spent waiting for the worker (its own compute);
* `call_timeout`: the whole call, bridge time included (the host's LM and tool calls). This one is
  hard: a bridge call runs in a helper thread and the call ends at the deadline even if that bridge
  call has not (its late result is dropped).

No read or write can block past the deadline (the host's end of the channel is non-blocking; see
protocol.py), and the worker must keep to the protocol: it speaks only after reading everything the
host sent (checked before every frame it sends), reads its request and every reply in time, and sends
well-formed frames under the size cap. A worker that breaks any of this is killed by the caller and
the call fails with a SpecialistError saying which rule it broke.

Predictor and tool requests are validated by the host bridge (bridge.py: strict signature grammar,
declared inputs only, their declared types, plain JSON, caps) before `bridge.predict` / `bridge.tool`
runs them, in a thread that carries the caller's context (so `dspy.settings.trace`, `dspy.context`
and the usage ledger set by the caller apply, and DSPy's trace records each predictor call) and the
request's own scope (scope.py): an LM response cache of its own and bounded logs.
"""

from __future__ import annotations

import contextvars
import os
import select
import signal
import threading
import time
from typing import Any, Callable, Mapping

from . import protocol
from .bridge import (
    BridgeRefused,
    PredictRequest,
    ToolRequest,
    json_size,
    parse_predict,
    parse_tool,
    sandbox_error_text,
    to_plain,
)
from .errors import SpecialistError
from .scope import RequestScope
from .supply import Worker

STARTUP_TIMEOUT = 30.0
CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT,
                           getattr(signal, "SIGSYS", signal.SIGABRT)})


class LateWorker(Exception):
    """A prepared worker turned out dead before it was given its request (safe to retry with another)."""


class _Late(Exception):
    """A bridge call did not finish before the call's deadline."""


class CallState:
    """Bookkeeping of one call: bridge requests served and refused, distinct predictors, clocks."""

    def __init__(self, timeout: float, call_timeout: float):
        self.start = time.monotonic()
        self.deadline = self.start + call_timeout
        self.timeout, self.call_timeout = timeout, call_timeout
        self.spent = 0.0            # waiting for the worker
        self.bridge_seconds = 0.0   # serving its requests
        self.n_pred = self.n_tool = 0
        self.defs: set[tuple] = set()
        self.refused: list[str] = []
        self.limit_hit: str | None = None
        self.host_exc: BaseException | None = None

    def timeout_error(self) -> SpecialistError:
        if self.bridge_seconds > 0 and self.spent < self.timeout:
            return SpecialistError(f"call timeout after {self.call_timeout:g}s (bridge time included)", "timeout")
        return SpecialistError(f"timeout after {self.timeout:g}s", "timeout")


class _WorkerSpoke(Exception):
    """The worker sent something, or went away, while the host was serving its request."""


def run_bridged(fn: Callable[[], Any], deadline: float, scope: RequestScope | None = None,
                watch: int | None = None) -> Any:
    """fn() in a helper thread carrying this thread's context (and `scope`: the request's own LM cache and
    bounded logs); its value, or its exception re-raised here. _Late if it is still running at `deadline`;
    _WorkerSpoke if the socket `watch` becomes readable first (the worker died, or spoke out of turn). In
    both cases fn finishes on its own and its result is dropped."""
    box: dict[str, Any] = {}
    ctx = contextvars.copy_context()
    done_r, done_w = os.pipe()

    def scoped() -> Any:
        if scope is None:
            return fn()
        with scope.active():
            return fn()

    def target() -> None:
        try:
            box["value"] = ctx.run(scoped)
        except BaseException as e:  # noqa: BLE001 - re-raised in the calling thread
            box["error"] = e
        finally:
            try:
                os.write(done_w, b"x")
            except OSError:   # the caller stopped waiting
                pass
            os.close(done_w)

    t = threading.Thread(target=target, name="sandbox-bridge", daemon=True)
    t.start()
    try:
        r, _, _ = select.select([done_r] + ([watch] if watch is not None else []), [], [],
                                max(0.0, deadline - time.monotonic()))
    finally:
        os.close(done_r)
    if done_r not in r:
        raise _WorkerSpoke() if r else _Late()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class Exchange:
    """Drives one call (see the module docstring). `pool` supplies the limits and the counters."""

    def __init__(self, pool: Any, worker: Worker, bridge: Any, state: CallState):
        self.pool, self.w, self.bridge, self.st = pool, worker, bridge, state
        self.cap = pool.max_output_bytes + 4 * pool.stdout_cap + 65536
        self.scope: RequestScope | None = None     # made at the first bridge call: this request's LM cache

    # -- frames ------------------------------------------------------------------------------------
    def ready(self) -> dict:
        """The worker's "ready" (bounded by the deadline, and by STARTUP_TIMEOUT for a fresh worker)."""
        if self.w.ready is not None:
            return self.w.ready
        deadline = min(self.st.deadline, time.monotonic() + STARTUP_TIMEOUT)
        try:
            m = protocol.recv(self.w.fd, deadline=deadline, max_bytes=4096)
        except protocol.ChannelClosed:
            if self.w.prepared:
                raise LateWorker() from None
            raise self.pool._crash_reason(self.w) from None
        except protocol.RecvTimeout:
            self.pool._count("timeouts")
            raise SpecialistError(f"the worker did not start within {deadline - self.st.start:.3g}s", "timeout") \
                from None
        except Exception as e:  # noqa: BLE001 - malformed
            raise SpecialistError(f"protocol error ({type(e).__name__} before the worker started)", "protocol") \
                from None
        return m

    def send(self, msg: dict, what: str) -> None:
        try:
            protocol.send(self.w.fd, msg, deadline=self.st.deadline, strict=True)
        except protocol.PeerSpoke:
            self.pool._count("violations")
            raise SpecialistError(f"protocol violation: the worker sent a message while the host was still sending "
                                  f"{what}", "protocol") from None
        except protocol.SendTimeout:
            self.pool._count("violations")
            raise SpecialistError(f"protocol violation: the worker did not read {what} (the call's deadline passed "
                                  "while the host was sending it)", "protocol") from None
        except (protocol.ChannelClosed, OSError):
            raise self.pool._crash_reason(self.w) from None

    def recv(self) -> dict:
        st = self.st
        now = time.monotonic()
        deadline = min(now + (st.timeout - st.spent), st.deadline)
        if deadline <= now:
            self.pool._count("timeouts")
            raise st.timeout_error()
        try:
            m = protocol.recv(self.w.fd, deadline=deadline, max_bytes=self.cap)
        except protocol.RecvTimeout:
            st.spent += time.monotonic() - now
            self.pool._count("timeouts")
            raise st.timeout_error() from None
        except protocol.ChannelClosed:
            raise self.pool._crash_reason(self.w) from None
        except protocol.FrameTooLarge as e:
            self.pool._count("violations")
            raise SpecialistError(f"output too large (worker message {e})", "output") from None
        except Exception as e:  # noqa: BLE001 - undecodable frame
            self.pool._count("violations")
            raise SpecialistError(f"protocol error ({type(e).__name__})", "protocol") from None
        st.spent += time.monotonic() - now
        if protocol.unread(self.w.fd) > 0:
            self.pool._count("violations")
            raise SpecialistError("protocol violation: the worker sent a message before reading the host's last "
                                  "one", "protocol")
        return m

    # -- the call ------------------------------------------------------------------------------------
    def run(self, msg: dict) -> dict:
        """Send the request; serve the worker's bridge requests; return its final frame."""
        self.pool._check_ready(self.ready(), self.w)
        if msg.get("hash") in self.w.loaded and msg.get("preloaded"):
            msg = {k: v for k, v in msg.items() if k != "code"}    # it holds the program already
        try:
            protocol.send(self.w.fd, msg, deadline=self.st.deadline, strict=True)
        except protocol.PeerSpoke:
            self.pool._count("violations")
            raise SpecialistError("protocol violation: the worker sent a message before reading its request",
                                  "protocol") from None
        except (protocol.ChannelClosed, OSError) as e:
            if self.w.prepared and not isinstance(e, protocol.SendTimeout):
                raise LateWorker() from None   # it died before its request reached it: nothing of it ran
            if isinstance(e, protocol.SendTimeout):
                self.pool._count("violations")
                raise SpecialistError("protocol violation: the worker did not read its request (the call's "
                                      "deadline passed while the host was sending it)", "protocol") from None
            raise self.pool._crash_reason(self.w) from None
        while True:
            m = self.recv()
            op = m.get("op")
            if op in ("predict", "tool"):
                reply = self.serve(m)
                self.send(reply, "the reply to its request")
                if time.monotonic() > self.st.deadline:
                    self.pool._count("timeouts")
                    raise self.st.timeout_error()
                continue
            if op not in ("result", "error"):
                self.pool._count("violations")
                raise SpecialistError("protocol error (unexpected message)", "protocol")
            return m

    # -- bridge requests -------------------------------------------------------------------------------
    def _refuse(self, reason: str) -> dict:
        self.st.refused.append(reason)
        self.pool._count("refused")
        return {"op": "reply", "ok": False, "error": reason}

    def _limit(self, reason: str) -> dict:
        self.st.limit_hit = self.st.limit_hit or reason
        return {"op": "reply", "ok": False, "error": reason, "limit": True}

    def serve(self, m: dict) -> dict:
        pool, st = self.pool, self.st
        if m.get("op") == "predict":
            st.n_pred += 1
            if st.n_pred > pool.max_predictor_calls:
                return self._limit(f"predictor call limit ({pool.max_predictor_calls}) exceeded")
            try:
                req = parse_predict(m, pool.limits)
            except BridgeRefused as e:
                return self._refuse(str(e))
            st.defs.add(req.key)
            if len(st.defs) > pool.limits.max_predictors:
                return self._limit(f"more than {pool.limits.max_predictors} distinct predictors in one call")
            return self._call(lambda: self._predict(req), f"predictor {req.name!r}")
        st.n_tool += 1
        if st.n_tool > pool.max_tool_calls:
            return self._limit(f"tool call limit ({pool.max_tool_calls}) exceeded")
        try:
            treq = parse_tool(m, pool.tool_names, pool.limits)
        except BridgeRefused as e:
            return self._refuse(str(e))
        return self._call(lambda: self._tool(treq), f"tool {treq.name!r}")

    def _call(self, fn: Callable[[], Any], what: str) -> dict:
        st = self.st
        if self.bridge is None:
            return self._refuse(f"{what}: no host bridge")
        t0 = time.monotonic()
        if t0 > st.deadline:
            return self._limit(f"call timeout after {st.call_timeout:g}s (bridge time included)")
        if self.scope is None:
            self.scope = RequestScope()
        try:
            value = run_bridged(fn, st.deadline, self.scope, self.w.fd)
        except _WorkerSpoke:
            if not protocol.has_data(self.w.fd):
                raise self.pool._crash_reason(self.w) from None
            self.pool._count("violations")
            raise SpecialistError(f"protocol violation: the worker sent a message while the host was serving its "
                                  f"request ({what})", "protocol") from None
        except _Late:
            self.pool._count("timeouts")
            raise SpecialistError(f"call timeout after {st.call_timeout:g}s (bridge time included; {what} was "
                                  "still running)", "timeout") from None
        except BridgeRefused as e:
            return self._refuse(str(e))
        except Exception as e:  # noqa: BLE001 - surfaces in the sandbox as dspy.HostError, our words only
            st.host_exc = e
            return {"op": "reply", "ok": False, "error": sandbox_error_text(e, what)}
        finally:
            st.bridge_seconds += time.monotonic() - t0
        return {"op": "reply", "ok": True, "value": value}

    def _predict(self, req: PredictRequest) -> dict:
        raw = self.bridge.predict(req)
        if not isinstance(raw, Mapping):
            raise BridgeRefused(f"predictor {req.name!r} produced no fields")
        names = req.signature.output_names + (("reasoning",) if req.kind == "ChainOfThought" else ())
        out = to_plain({k: raw[k] for k in names if k in raw})
        if json_size(out) > self.pool.max_output_bytes:
            raise BridgeRefused(f"predictor {req.name!r} answered more than {self.pool.max_output_bytes} bytes")
        return out

    def _tool(self, req: ToolRequest) -> Any:
        value = to_plain(self.bridge.tool(req))
        if json_size(value) > self.pool.limits.max_result_bytes:
            raise BridgeRefused(f"tool {req.name!r} returned more than {self.pool.limits.max_result_bytes} bytes")
        return value
