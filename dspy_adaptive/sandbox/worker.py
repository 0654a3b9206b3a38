"""Sandbox worker process: `python -I -S -B worker.py <in_fd> <out_fd> <config-json> <restricted-python-dir>`.

Why our own worker and not dspy's: `dspy.primitives.LocalInterpreter` runs code with full
builtins in a plain subprocess (it is a convenience, not a sandbox), and `dspy.Flex` starts a
fresh interpreter per forward (~70 ms CPU per call here). This worker is started once, stays
warm, and serves many calls with a fresh restricted namespace each time (~1 ms per call).

Normally a worker is not started from scratch: the pool's zygote (zygote.py) does steps 1-2 once
and forks each worker from that image, which then runs `confine` (steps 3-4). Started directly
(`SandboxPool(start_method="spawn")`), the worker does all four itself.

Start-up, in order, before any specialist code can run:
1. runs as the host user (root here) with `-I -S -B` (forkserver.interpreter), an environment
   scrubbed to PATH+LANG, cwd = a fresh scratch dir, stdin/stdout/stderr on /dev/null, only the two
   protocol pipes inherited;
2. pre-imports everything it will ever need (after the privilege drop the interpreter's files
   under /root are unreadable, so late imports would fail -- that is a feature);
3. sets rlimits: RLIMIT_AS (memory), RLIMIT_FSIZE=0 (SIGXFSZ ignored, so writes raise EFBIG),
   RLIMIT_NOFILE small, RLIMIT_CORE=0, RLIMIT_NPROC=0 (no fork), RLIMIT_CPU soft limit re-armed
   per call relative to CPU already used (backstop for the host's wall-clock timeout);
4. if root: setgroups([]), setgid(65534), setuid(65534) -- irreversible; verified. (Done here
   rather than in a Popen preexec_fn because preexec_fn is unsafe with many host threads;
   the privilege drop still happens before the first byte of specialist code is read.)
Then it loops: receive {"op": "run"} -> execute -> reply, with predictor/tool RPCs in between.
Specialist print() goes to a capped buffer; the protocol fds are unreachable from restricted code.
"""

from __future__ import annotations

import os
import sys

# -I removes the script directory from sys.path; add it back for our three standalone modules.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__" and len(sys.argv) > 4:
    sys.path.append(sys.argv[4])  # started with -S: RestrictedPython's directory, from the host

import base64  # noqa: E402
import builtins  # noqa: E402
import decimal  # noqa: E402
import json  # noqa: E402
import marshal  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

import policy  # noqa: E402
import protocol  # noqa: E402
import runtime  # noqa: E402

NOBODY = 65534


class Failure(Exception):
    def __init__(self, kind: str, reason: str, fatal: bool = False):
        super().__init__(reason)
        self.kind, self.reason, self.fatal = kind, reason, fatal


def _preimport() -> None:
    runtime.module_proxies()
    for name in ("_strptime", "encodings.utf_16", "encodings.utf_32", "encodings.latin_1",
                 "encodings.ascii", "encodings.cp1252", "encodings.idna", "unicodedata"):
        try:
            __import__(name)
        except Exception:  # pragma: no cover
            pass
    import datetime
    datetime.datetime.strptime("2020", "%Y")


def _setup(cfg: dict, fds: tuple[int, int]) -> None:
    _preimport()
    confine(cfg, fds)


def confine(cfg: dict, fds: tuple[int, int]) -> None:
    """Steps 3-4 of the start-up: rlimits and the privilege drop. Called after `_preimport`, either
    in a freshly started worker (`_setup`) or in a child forked by the zygote (zygote.py)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    mem = int(cfg["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    nofile = max(max(fds) + 1, 8)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        if os.getuid() == 0 or os.geteuid() == 0:  # pragma: no cover
            raise SystemExit("privilege drop failed")
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:  # pragma: no cover
            raise SystemExit("privilege drop is reversible")
    sys.setrecursionlimit(int(cfg.get("recursion_limit", 500)))


class Ctx:
    """Per-call state; the shim calls .predict(), tools call .tool()."""

    def __init__(self, chan, msg: dict, shim_getter):
        self.chan = chan
        self.max_calls = int(msg["max_predictor_calls"])
        self.max_bytes = int(msg["max_output_bytes"])
        self.calls = 0
        self.shim = shim_getter
        self.root = None
        self.anon = 0

    def _rpc(self, payload: dict, what: str):
        try:
            data = protocol.encode(payload, self.max_bytes)
        except protocol.FrameTooLarge as e:
            raise ValueError(f"{what} arguments too large ({e})") from None
        except (TypeError, ValueError) as e:
            raise TypeError(f"{what} arguments are not JSON-serializable: {e}") from None
        try:
            protocol.send_bytes(self.chan[1], data)
            reply = protocol.recv(self.chan[0])
        except (protocol.ChannelClosed, OSError):
            os._exit(3)  # host went away
        if reply.get("ok"):
            return reply.get("value")
        shim = self.shim()
        err = reply.get("error", "host error")
        if reply.get("limit"):
            raise shim["PredictorLimitError"](err)
        raise shim["HostError"](f"{what} failed: {err}")

    def predict(self, pred, kwargs: dict):
        shim = self.shim()
        if pred._pname is None:
            for name, p in shim["named_predictors"](self.root) if self.root is not None else ():
                if p._pname is None:
                    object.__setattr__(p, "_pname", name)
            if pred._pname is None:
                self.anon += 1
                object.__setattr__(pred, "_pname", f"anonymous_{pred.KIND.lower()}_{self.anon}")
        self.calls += 1
        if self.calls > self.max_calls:
            LIMIT_HIT[0] = True
            raise shim["PredictorLimitError"](f"predictor call limit ({self.max_calls}) exceeded")
        inputs = {k: (v.toDict() if isinstance(v, shim["Prediction"]) else v) for k, v in kwargs.items()}
        value = self._rpc({"op": "predict", "name": pred._pname, "kind": pred.KIND,
                           "signature": pred._spec, "instructions": pred._instructions,
                           "inputs": inputs}, f"predictor {pred._pname!r}")
        if not isinstance(value, dict):
            raise shim["HostError"](f"predictor {pred._pname!r} returned {type(value).__name__}, not a dict")
        return shim["Prediction"](**value)

    def make_tool(self, name: str):
        def tool(*args, **kwargs):
            if args:
                raise TypeError(f"tool {name!r} takes keyword arguments only (got {len(args)} positional)")
            return self._rpc({"op": "tool", "name": name, "kwargs": kwargs}, f"tool {name!r}")
        tool.__name__ = tool.__qualname__ = name
        return tool


_CODE_CACHE: dict[str, object] = {}
LIMIT_HIT = [False]  # set when this run exceeded max_predictor_calls (even if the specialist caught it)


def _get_code(msg: dict):
    key = ("checked:" if msg.get("checked", True) else "raw:") + msg["hash"]
    code = _CODE_CACHE.get(key)
    if code is None and msg.get("code") is not None and msg.get("checked", True):
        code = _load_code(msg["code"])        # compiled by the host's policy check (compiler.py)
        _remember(key, code)
    if code is None:
        src = msg.get("source")
        if src is None:
            raise Failure("protocol", "unknown program (source not sent)")
        if msg.get("checked", True):
            code, errors = policy.restricted_compile(src)
            if code is None:
                raise Failure("policy", "does not compile in the worker: " + "; ".join(errors))
        else:
            code = compile(src, policy.FILENAME, "exec", dont_inherit=True)
        _remember(key, code)
    return code


def _load_code(data) -> types.CodeType:
    try:
        code = marshal.loads(base64.b64decode(data))
    except Exception as e:  # noqa: BLE001
        raise Failure("protocol", f"undecodable program code ({type(e).__name__})") from None
    if not isinstance(code, types.CodeType) or code.co_filename != policy.FILENAME:
        raise Failure("protocol", "program code is not a compiled specialist")
    return code


def _remember(key: str, code) -> None:
    if len(_CODE_CACHE) > 256:
        _CODE_CACHE.pop(next(iter(_CODE_CACHE)))
    _CODE_CACHE[key] = code


def _line_of(exc: BaseException) -> int | None:
    tb, line = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == policy.FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _describe(exc: BaseException) -> str:
    try:
        msg = str(exc)
    except Exception:  # pragma: no cover
        msg = "<unprintable>"
    if len(msg) > 2000:
        msg = msg[:2000] + "..."
    s = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    line = _line_of(exc)
    return f"{s} (line {line})" if line else s


def _execute(msg: dict, chan, printer) -> dict:
    code = _get_code(msg)
    shim_box: dict = {}
    ctx = Ctx(chan, msg, lambda: shim_box)
    dspy_proxy, shim = runtime.make_dspy(ctx)
    shim_box.update(shim)
    tools = {name: ctx.make_tool(name) for name in msg.get("tools", ())}
    if msg.get("checked", True):
        g = runtime.make_globals(printer=printer, dspy_proxy=dspy_proxy, shim=shim, tools=tools)
    else:  # test-only: policy bypassed, full builtins -- exercises the OS-level layers alone
        g = {"__builtins__": builtins, "__name__": runtime.SANDBOX_MODULE, "dspy": dspy_proxy, **tools}
    decimal.setcontext(decimal.Context())
    exec(code, g)
    cls = g.get(msg["class_name"])
    if not (isinstance(cls, type) and issubclass(cls, shim["Module"])):
        raise Failure("protocol", f"class {msg['class_name']!r} is not a dspy.Module subclass at run time")
    inst = cls()
    ctx.root = inst
    inputs = msg.get("inputs") or {}
    out = inst(**inputs)
    if not isinstance(out, shim["Prediction"]):
        raise Failure("exception", f"forward must return dspy.Prediction, got {type(out).__name__}")
    outputs = dict(out._store)
    for k in outputs:
        if not isinstance(k, str):
            raise Failure("output", f"output field names must be strings, got {type(k).__name__}")
    try:
        data = json.dumps(outputs, ensure_ascii=False, default=str)
    except (ValueError, TypeError) as e:
        raise Failure("output", f"outputs are not serializable: {e}") from None
    limit = int(msg["max_output_bytes"])
    if len(data.encode("utf-8")) > limit:
        raise Failure("output", f"output too large ({len(data.encode('utf-8'))} bytes > {limit} bytes)")
    return {"outputs": json.loads(data), "calls": ctx.calls}


def serve(in_fd: int, out_fd: int) -> None:
    chan = (in_fd, out_fd)
    protocol.send(out_fd, {"op": "ready", "uid": os.getuid(), "pid": os.getpid()})
    while True:
        try:
            msg = protocol.recv(in_fd)
        except protocol.ChannelClosed:
            return
        if msg.get("op") == "exit":
            return
        if msg.get("op") != "run":
            protocol.send(out_fd, {"op": "error", "kind": "protocol", "reason": f"unexpected op {msg.get('op')!r}",
                                   "stdout": "", "fatal": False, "cached": False})
            continue
        used = resource.getrusage(resource.RUSAGE_SELF)
        cpu = used.ru_utime + used.ru_stime
        soft = int(cpu + float(msg.get("cpu_budget", 30.0))) + 2
        resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))
        printer = runtime.CappedPrinter(int(msg.get("stdout_cap", 65536)))
        LIMIT_HIT[0] = False
        reply: dict
        fatal = False
        t0 = time.perf_counter()
        try:
            res = _execute(msg, chan, printer)
            reply = {"op": "result", "outputs": res["outputs"], "calls": res["calls"]}
        except Failure as e:
            reply = {"op": "error", "kind": e.kind, "reason": e.reason}
            fatal = e.fatal
        except MemoryError:
            reply = {"op": "error", "kind": "memory", "reason": None}
            fatal = True
        except RecursionError as e:
            reply = {"op": "error", "kind": "exception", "reason": _describe(e)}
        except BaseException as e:  # noqa: BLE001 - anything the specialist raised (incl. SystemExit)
            reply = {"op": "error", "kind": "exception", "reason": _describe(e),
                     "host_error": type(e).__name__ in ("HostError", "PredictorLimitError")}
        reply.update(stdout=printer.text(), fatal=fatal, cached=True, limit_hit=LIMIT_HIT[0],
                     compute=time.perf_counter() - t0)
        if not any(k.startswith(("checked:", "raw:")) and k.endswith(msg["hash"]) for k in _CODE_CACHE):
            reply["cached"] = False
        try:
            protocol.send(out_fd, reply)
        except MemoryError:  # pragma: no cover
            os._exit(4)
        if fatal:
            return


def main(argv: list[str]) -> None:
    in_fd, out_fd, cfg = int(argv[1]), int(argv[2]), json.loads(argv[3])
    _setup(cfg, (in_fd, out_fd))
    serve(in_fd, out_fd)


if __name__ == "__main__":
    main(sys.argv)
