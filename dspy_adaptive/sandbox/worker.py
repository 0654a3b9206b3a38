"""Sandbox worker: one process serves exactly ONE request, then exits.

Normally forked from the warm zygote (zygote.py), which has already imported everything a request
can need and built the clean room, ahead of the request it will serve; started directly (`python -I
-S -B worker.py <fd> <config-json> <restricted-python-dir>`, `SandboxPool(start_method="spawn")`) it
does that itself.

Start-up, in order, before any specialist code can run:
1. the process has the scrubbed environment (PATH + LANG), cwd "/", stdin/stdout/stderr on
   /dev/null, only its one protocol socket, a session of its own (`-I -S -B`: no user site, no .pth
   files, no PYTHON* variables, no .pyc writes);
2. everything is pre-imported (after confinement no file can be opened, so a late import fails --
   that is a feature);
3. `isolation.confine`: a wall-clock limit of its own, rlimits, uid of its own (root hosts), a
   parent-death signal, Landlock, seccomp -- each selected layer applied or the worker refuses to serve.
Then: send "ready" (uid, applied layers), receive the one "run", shift its allocations and key its
`hash()` at random (`scramble`), execute the request with the restricted namespace (runtime.request_globals),
run the garbage collector INSIDE the request's time (so a slow finalizer is charged to the request that
made it), reply, and `os._exit`. Nothing the request created -- class registries, decimal contexts,
finalizers, patched objects -- can reach another request, because no other request ever runs in this
process. If the channel to the host fails in any way mid-request, the worker exits at once.
"""

from __future__ import annotations

import os
import sys

# -I removes the script directory from sys.path; add it back for our standalone modules.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__" and len(sys.argv) > 3:
    sys.path.append(sys.argv[3])  # started with -S: RestrictedPython's directory, from the host

import base64  # noqa: E402
import builtins  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import marshal  # noqa: E402
import mmap  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

import allowlist  # noqa: E402
import isolation  # noqa: E402
import protocol  # noqa: E402
import runtime  # noqa: E402


class Failure(Exception):
    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind, self.reason = kind, reason


_PREBUILT: dict = {}          # a request's restricted globals, built once in the zygote (see prebuild)
_RPC: list = [None]           # the prebuilt globals' route to the host, set in the worker after fork


def _late_rpc(payload: dict):
    return _RPC[0](payload)


def prebuild(request_cfg: dict) -> None:
    """Build the restricted globals of a request once, in the zygote: every forked worker inherits a
    pristine copy (copy-on-write), so a request does not pay ~1 ms to define the clean room's classes.
    Only the RPC is bound after the fork."""
    key = (tuple(request_cfg.get("tools", ())), int(request_cfg["stdout_cap"]), int(request_cfg["max_predictor_calls"]))
    g, internals = runtime.request_globals(rpc=_late_rpc, tool_names=key[0], stdout_cap=key[1],
                                           max_predictor_calls=key[2])
    _PREBUILT.clear()
    _PREBUILT.update(key=key, globals=g, internals=internals)


def preimport(request_cfg: dict | None = None) -> None:
    """Everything a request may need, loaded while files can still be read."""
    runtime.load_cleanroom()
    if request_cfg:
        prebuild(request_cfg)
    for name in ("_strptime", "encodings.utf_16", "encodings.utf_32", "encodings.latin_1",
                 "encodings.ascii", "encodings.cp1252", "encodings.idna", "unicodedata"):
        try:
            __import__(name)
        except Exception:  # pragma: no cover
            pass
    import datetime
    datetime.datetime.strptime("2020", "%Y")
    datetime.datetime(2020, 1, 1).strftime("%Y-%m-%d %H:%M %a %b %Z")
    time.localtime()                      # reads the zone file now, not in a confined worker
    isolation.prepare_landlock(isolation.landlock_abi())
    isolation.prepare_timer()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # inherited by every worker (see isolation.set_rlimits)
    gc.collect()
    gc.freeze()   # what is loaded now is permanent: a worker's collector scans only its request's objects
    isolation.trim_heap()   # free heap pages back to the kernel: fewer pages for every fork to copy


def _load_code(data) -> types.CodeType:
    try:
        code = marshal.loads(base64.b64decode(data))
    except Exception as e:  # noqa: BLE001
        raise Failure("protocol", f"undecodable program code ({type(e).__name__})") from None
    if not isinstance(code, types.CodeType) or code.co_filename != allowlist.FILENAME:
        raise Failure("protocol", "program code is not a compiled specialist")
    return code


PROGRAMS: dict = {}      # source hash -> code object, loaded into the zygote ahead of requests (load_program)
_HASH_KEY: list = []     # this worker's hash() key, drawn before its request arrives (scramble)


def load_program(source_hash: str, data: str) -> bool:
    """In the zygote: keep a program's code object (compiled and checked on the host), so workers forked
    afterwards need not be sent or decode it. Never executed here."""
    try:
        code = _load_code(data)
    except Failure:
        code = None     # kept as a gap, so the host's count of what is held stays right: requests then carry it
    PROGRAMS[str(source_hash)] = code
    while len(PROGRAMS) > 64:       # forkserver.MAX_PROGRAMS: the host forgets the same ones
        PROGRAMS.pop(next(iter(PROGRAMS)))
    return True


def _get_code(msg: dict):
    """The request's code object, compiled on the host (the policy's RestrictedPython compile, or a plain
    compile on the test-only unchecked path): sent with the request, or loaded into the zygote before this
    worker was forked. A worker never compiles, so it never loads a compiler."""
    if msg.get("code") is not None:
        return _load_code(msg["code"])
    code = PROGRAMS.get(msg.get("hash"))
    if code is None:
        raise Failure("protocol", "no program sent")
    return code


def _line_of(exc: BaseException) -> int | None:
    tb, line = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == allowlist.FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _describe(exc: BaseException) -> str:
    try:
        msg = str(exc)
    except Exception:  # noqa: BLE001
        msg = "<unprintable>"
    if len(msg) > 2000:
        msg = msg[:2000] + "..."
    try:
        name = type(exc).__name__
    except Exception:  # noqa: BLE001
        name = "Exception"
    s = f"{name}: {msg}" if msg else name
    line = _line_of(exc)
    return f"{s} (line {line})" if line else s


def make_rpc(chan: tuple[int, int], max_bytes: int):
    """rpc(payload) -> (ok, value): one request to the host and its reply. ok is True, False or "limit".

    Anything that goes wrong on the channel itself -- the host gone, a reply cut short, a MemoryError while
    reading it -- ends this process at once: a worker that lost its place in the exchange must not go on
    sending requests whose replies it will never read."""
    def rpc(payload: dict):
        try:
            data = protocol.encode(payload, max_bytes, default=str)   # the sandbox's own objects, as text
        except protocol.FrameTooLarge as e:
            return False, f"arguments too large ({e})"
        except (TypeError, ValueError, RecursionError):
            return False, "arguments must be plain JSON values (text, numbers, booleans, None, lists, dicts)"
        try:
            protocol.send_bytes(chan[1], data)
            reply = protocol.recv(chan[0])
            ok, limit = reply.get("ok"), reply.get("limit")
            value = reply.get("value") if ok else str(reply.get("error") or "host error")
        except BaseException:  # noqa: BLE001 - see above
            os._exit(3)
        if ok:
            return True, value
        return ("limit" if limit else False), value
    return rpc


def execute(msg: dict, chan: tuple[int, int], built: dict) -> dict:
    """Run the request; return the reply fields (and fill `built` with the request's internals).
    Raises what the specialist raised."""
    code = _get_code(msg)
    rpc = make_rpc(chan, int(msg["max_output_bytes"]))
    key = (tuple(msg.get("tools", ())), int(msg.get("stdout_cap", 65536)), int(msg["max_predictor_calls"]))
    if _PREBUILT.get("key") == key:
        _RPC[0] = rpc
        g, internals = _PREBUILT["globals"], _PREBUILT["internals"]
    else:
        g, internals = runtime.request_globals(rpc=rpc, tool_names=key[0], stdout_cap=key[1],
                                               max_predictor_calls=key[2])
    built.update(internals)
    internals["hash_key"][:] = _HASH_KEY or _new_hash_key()   # the request's own hash() key (cleanroom.keyed_hash)
    if not msg.get("checked", True):   # test-only: policy bypassed, full builtins -- the OS layers alone
        g = {"__builtins__": builtins, "__name__": runtime.SANDBOX_MODULE, "dspy": built["dspy"], **built["tools"]}
    shim = built["shim"]
    exec(code, g)
    cls = g.get(msg["class_name"])
    if not (isinstance(cls, type) and issubclass(cls, shim["Module"])):
        raise Failure("protocol", f"class {msg['class_name']!r} is not a dspy.Module subclass at run time")
    inst = cls()
    built["root"][0] = inst
    if msg.get("describe"):   # the predictors __init__ created, by the names their calls would carry; no forward
        found = [[name, p.KIND, p._spec, p._instructions] for name, p in built["named_predictors"](inst)]
        data = json.dumps({"predictors": found}, ensure_ascii=False, default=str)
        if len(data.encode("utf-8")) > int(msg["max_output_bytes"]):
            raise Failure("output", "the predictor list is too large")
        return {"outputs": json.loads(data)}
    out = inst(**(msg.get("inputs") or {}))
    if not isinstance(out, shim["Prediction"]):
        raise Failure("exception", f"forward must return dspy.Prediction, got {type(out).__name__}")
    outputs = out.toDict()
    for k in outputs:
        if not isinstance(k, str):
            raise Failure("output", f"output field names must be strings, got {type(k).__name__}")
    try:   # sets, dates and the like become their text (this runs in the sandbox, on its own objects)
        data = json.dumps(outputs, ensure_ascii=False, default=str)
    except (ValueError, TypeError) as e:
        raise Failure("output", f"outputs are not serializable: {str(e)[:200]}") from None
    limit = int(msg["max_output_bytes"])
    if len(data.encode("utf-8")) > limit:
        raise Failure("output", f"output too large ({len(data.encode('utf-8'))} bytes > {limit} bytes)")
    return {"outputs": json.loads(data)}


def serve_one(in_fd: int, out_fd: int, applied: dict) -> None:
    """Serve the one request of this process, then exit. (`in_fd` and `out_fd` are the same socket.)"""
    scramble()
    flags = ",".join('"%s":%s' % (k, "true" if v else "false") for k, v in applied.items())
    body = ('{"op":"ready","uid":%d,"pid":%d,"applied":{%s}}' % (os.getuid(), os.getpid(), flags)).encode()
    protocol.send_bytes(out_fd, protocol.HEADER.pack(len(body)) + body)   # (json untouched: fewer pages written)
    try:
        msg = protocol.recv(in_fd)
    except BaseException:  # noqa: BLE001 - the host went away or sent garbage: nothing to serve
        os._exit(0)
    if msg.get("op") != "run":
        os._exit(0)
    built: dict = {}
    t0 = time.perf_counter()
    try:
        reply = execute(msg, (in_fd, out_fd), built)
        reply["op"] = "result"
    except Failure as e:
        reply = {"op": "error", "kind": e.kind, "reason": e.reason}
    except MemoryError:
        reply = {"op": "error", "kind": "memory", "reason": None}
    except BaseException as e:  # noqa: BLE001 - anything the specialist raised (incl. SystemExit)
        reply = {"op": "error", "kind": "exception", "reason": _describe(e),
                 "host_error": type(e).__name__ in ("HostError", "PredictorLimitError")}
    try:
        gc.collect()            # finalizers of this request run now, inside its time
    except BaseException:  # noqa: BLE001
        pass
    calls = built.get("calls", [0])[0]
    printer = built.get("printer")
    reply.update(stdout=printer.text() if printer is not None else "",
                 limit_hit=calls > int(msg.get("max_predictor_calls", 0)), compute=time.perf_counter() - t0)
    try:
        protocol.send(out_fd, reply)
    except BaseException:  # noqa: BLE001
        os._exit(4)
    os._exit(0)


_KEEP: list = []   # the scramble's allocations, alive until the process exits


def _new_hash_key(key: bytes | None = None) -> list[int]:
    key = key or os.urandom(16)
    return [int.from_bytes(key[:8], "little"), int.from_bytes(key[8:16], "little") | 1]


def scramble() -> None:
    """Make this request's object addresses and hash() values differ from every other request's: every
    worker is forked from the same zygote image, so without this the n-th object a request allocates sits
    at the same address in each of them (and `id()` would say so). A random number of allocations in each
    small-object size class shifts where the request's own objects land, and a random-sized (untouched)
    mapping shifts large ones; the sandbox's hash() gets a key of its own. Done before the request arrives;
    the randomness comes from the kernel (getrandom), in one call."""
    entropy = os.urandom(16 + 32 + 34 + 1024)
    _HASH_KEY[:] = _new_hash_key(entropy[:16])
    random.seed(int.from_bytes(entropy[16:48], "little"))   # a fresh `random` (a forked process has its parent's)
    r, keys = entropy[48:82], memoryview(entropy[82:]).cast("H")     # 2 x 256 random 16-bit sort keys
    keep = [object() for _ in range(r[0])]                       # 16-byte blocks (0-255 of them)
    keep += [float(i) for i in range(r[1])]                      # 32-byte blocks
    for n, make in enumerate((object, float)):   # and the free list in a random order: the next blocks of these
        spare = [make() for _ in range(256)]     # classes are handed out from freed ones, last freed first
        spare = [spare[i] for i in sorted(range(256), key=keys[256 * n:256 * (n + 1)].__getitem__)]
        del spare                                # (a C sort on random keys: random.shuffle's Python loop cost more)
    for c in range(3, 33):                                       # 48 ... 512-byte blocks (bytes: 33 + n)
        keep += [bytes(16 * c - 33) for _ in range(r[c] & (255 if c < 5 else 15))]
    _KEEP.append(keep)
    _KEEP.append(mmap.mmap(-1, 4096 * (1 + (r[2] << 8 | r[33]) % 512)))   # never touched: costs no memory


def start(cfg: dict, fd: int) -> None:
    """In a fresh (forked or spawned) process: confine, then serve the one request. Never returns."""
    code = 1
    try:
        applied = isolation.confine(cfg, (fd,))
        sys.setrecursionlimit(int(cfg.get("recursion_limit", 500)))
        serve_one(fd, fd, applied)
        code = 0
    finally:
        os._exit(code)


def main(argv: list[str]) -> None:
    fd, cfg = int(argv[1]), json.loads(argv[2])
    isolation.set_seccomp_program(base64.b64decode(cfg["seccomp_bpf"]) if cfg.get("seccomp_bpf") else None)
    preimport()
    if cfg.get("netns") and os.getuid() == 0:
        isolation.enter_empty_netns()
    start(cfg, fd)


if __name__ == "__main__":
    main(sys.argv)
