"""Helpers shared by the sandbox tests (importable: tests/sandbox is on sys.path)."""

from __future__ import annotations

import threading

SECRET = "sk-test-secret"


class FakeBridge:
    """Answers every output field of the signature with '<field>:<first input value>'."""

    def __init__(self, fail_on: str | None = None, tool_result=None):
        self.calls: list[dict] = []
        self.tool_calls: list[dict] = []
        self.threads: set[int] = set()
        self.fail_on = fail_on
        self.tool_result = tool_result if tool_result is not None else [{"title": "t", "text": "hit"}]
        self.lock = threading.Lock()

    def predict(self, request):
        name, kind, inputs = request.name, request.kind, dict(request.inputs)
        with self.lock:
            self.calls.append(dict(name=name, kind=kind, signature=request.signature.text,
                                   instructions=request.instructions, inputs=inputs))
            self.threads.add(threading.get_ident())
        if self.fail_on == name:
            raise ValueError(f"lm exploded in {name}")
        first = next(iter(inputs.values()), "")
        res = {o: f"{o}:{first}" for o in request.signature.output_names}
        if kind == "ChainOfThought":
            res["reasoning"] = "because"
        return res

    def tool(self, request):
        with self.lock:
            self.tool_calls.append(dict(name=request.name, kwargs=dict(request.kwargs)))
            self.threads.add(threading.get_ident())
        return self.tool_result


def unchecked(body: str, args: str = "", imports: str = "os, sys") -> str:
    """A specialist with full Python (for pool._run_unchecked: the static policy and RestrictedPython
    switched off), whose forward runs `body`."""
    lines = "\n".join("        " + line for line in body.strip("\n").splitlines())
    return (f"import {imports}\n\nclass Solver(dspy.Module):\n"
            f"    def forward(self{', ' + args if args else ''}):\n{lines}\n")


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
