"""Attack material shared by the red team (`red_team.py`, `python -m benchmarks.faults`) and the sandbox
tests: the secret they hunt, the OS-level attacks of a specialist that escaped Python's restrictions and
the real targets they aim at, and raw protocol frames for the bridge alone."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from pathlib import Path

from dspy_adaptive.sandbox.testing import unchecked

SECRET = "sk-test-secret"
HOSTILE_DIR = Path(__file__).resolve().parent / "hostile"


#: What an attacker who escaped Python's restrictions tries first. Each attempt reports "ok" or
#: "denied: <error>"; `exec` comes last because, if it works, the worker becomes another program.
ATTACKS = r'''
res = {}
def attempt(name, fn):
    try:
        fn()
        res[name] = "ok"
    except BaseException as e:
        res[name] = "denied: " + type(e).__name__ + ": " + str(e)[:80]

def read_secret():
    with open(SECRET_FILE) as f:
        f.read()

def read_parent_environ():
    with open("/proc/%d/environ" % os.getppid(), "rb") as f:
        f.read()

def write_tmp():
    with open(TMP_FILE, "w") as f:
        f.write("pwned" * 100)
        f.flush()

def tcp():
    s = socket.create_connection(("127.0.0.1", PORT), timeout=1)
    s.sendall(b"pwned")
    s.close()

def unix_abstract():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1)
    s.connect(ABSTRACT)
    s.sendall(b"pwned")
    s.close()

def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)

attempt("read_secret", read_secret)
attempt("read_parent_environ", read_parent_environ)
attempt("list_root", lambda: os.listdir("/"))
attempt("write_tmp", write_tmp)
attempt("mkdir_tmp", lambda: os.mkdir(TMP_FILE + ".d"))
attempt("tcp_connect", tcp)
attempt("unix_abstract", unix_abstract)
attempt("signal_host", lambda: os.kill(HOST_PID, 0))
attempt("fork", fork)
if DO_EXEC:
    os.execv("/bin/sh", ["sh", "-c", "exit 0"])
    res["exec"] = "ok"
return dspy.Prediction(**res)
'''


def attack_source(*, secret_file: str, tmp_file: str, port: int, abstract: bytes, host_pid: int,
                  do_exec: bool = False) -> str:
    body = (ATTACKS.replace("SECRET_FILE", repr(secret_file)).replace("TMP_FILE", repr(tmp_file))
            .replace("PORT", str(port)).replace("ABSTRACT", repr(abstract)).replace("HOST_PID", str(host_pid))
            .replace("DO_EXEC", str(do_exec)))
    return unchecked(body, imports="os, sys, socket")


class Targets:
    """Everything the attacks aim at, and what reached it."""

    def __init__(self, tmp: Path):
        self.secret_file = tmp / "secret.txt"
        self.secret_file.write_text(SECRET)
        os.chmod(self.secret_file, 0o600)
        os.chmod(tmp, 0o755)
        self.tmp_file = f"/tmp/sbx-attack-{uuid.uuid4().hex}"
        self.received: list[bytes] = []
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.abstract = b"\0dspy-adaptive-test-" + uuid.uuid4().hex.encode()
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.abstract)
        self.unix.listen()
        for s in (self.tcp, self.unix):
            threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _accept(self, s: socket.socket) -> None:
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    self.received.append(conn.recv(100))
                except OSError:
                    pass

    def source(self, do_exec: bool = False) -> str:
        return attack_source(secret_file=str(self.secret_file), tmp_file=self.tmp_file, port=self.port,
                             abstract=self.abstract, host_pid=os.getpid(), do_exec=do_exec)

    def close(self) -> None:
        self.tcp.close()
        self.unix.close()
        Path(self.tmp_file).unlink(missing_ok=True)
        Path(self.tmp_file + ".d").rmdir() if Path(self.tmp_file + ".d").is_dir() else None


# ----------------------------------------------------------------------------------------- the bridge alone
RAW = '''
import json, struct
f = sys._getframe()
while f is not None and "out_fd" not in f.f_locals:
    f = f.f_back
rfd, wfd = f.f_locals["in_fd"], f.f_locals["out_fd"]
def call(msg):
    data = json.dumps(msg).encode()
    os.write(wfd, struct.pack(">I", len(data)) + data)
    head = b""
    while len(head) < 4:
        head += os.read(rfd, 4 - len(head))
    n = struct.unpack(">I", head)[0]
    body = b""
    while len(body) < n:
        body += os.read(rfd, n - len(body))
    return json.loads(body)
replies = [call(m) for m in MESSAGES]
return dspy.Prediction(replies=replies)
'''

ATTACK_FRAMES = [
    {"op": "predict", "name": "p", "kind": "Predict", "signature": "q: os.environ -> a", "inputs": {"q": "x"}},
    {"op": "predict", "name": "p", "kind": "Predict", "signature": "q: row.example -> a", "inputs": {"q": "x"}},
    {"op": "predict", "name": "p", "kind": "Predict", "signature": "q -> a",
     "inputs": {"q": "x", "config": {"api_base": "http://127.0.0.1:9", "n": 25}}},
    {"op": "predict", "name": "p", "kind": "Predict", "signature": "q -> " + ", ".join(f"f{i}" for i in range(8000)),
     "inputs": {"q": "x"}},
    {"op": "predict", "name": "p" * 100_000, "kind": "Predict", "signature": "q -> a", "inputs": {"q": "x"}},
    {"op": "predict", "name": "p", "kind": "Eval", "signature": "q -> a", "inputs": {"q": "x"}},
    {"op": "predict", "name": "p", "kind": "Predict", "signature": {"q": "os.environ"}, "inputs": {"q": "x"}},
    {"op": "predict", "name": "p", "kind": "Predict", "signature": "q -> a", "instructions": "x" * 900_000,
     "inputs": {"q": "x"}},
    {"op": "predict", "name": "p", "kind": "Predict", "signature": "q -> a",
     "inputs": {**{f"k{i}": "v" for i in range(20_000)}, "q": "x"}},
    {"op": "tool", "name": "open", "kwargs": {"file": "/etc/passwd"}},
    {"op": "tool", "name": "search", "kwargs": {"query": "x", "__class__": 1}},
]
