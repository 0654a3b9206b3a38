"""Red team: every attack we have, against each layer of the sandbox, classified.

    rejected     refused before running: the static policy (corpus) or the host bridge (raw frames)
    contained    ran, and nothing outside its worker changed: no secret in what came back, no file
                 touched, no listener reached, the host's CPU and memory unaffected, the pool still serves
    escaped      an effect outside the worker (a secret in the output, a file written, a listener reached)
    host-broken  the host process itself suffered: an exception other than SpecialistError, a second of
                 host CPU or 64 MB of host memory for one call, or a pool that no longer serves

Families (each row of `python -m benchmarks.faults`' red-team table):
  corpus, all layers          benchmarks/hardening/hostile/*.py through compile_program + the full pool
  corpus, policy only         the same with every OS layer switched off (the Python-level layers alone)
  corpus, policy bypassed     the rejected sources run anyway on the restricted worker path
  OS attacks, full Python     files, /proc, TCP, abstract sockets, signals, fork, exec with the policy and
                              RestrictedPython off: all OS layers on, then each layer alone (its own class)
  bridge, raw frames          crafted protocol frames from a worker with no policy and no OS layer
  downstream of the sandbox   hostile outputs against what reads them: forged judge verdicts, quadratic
                              regex inputs for the checkers, tool calls that differ from what a program
                              reports, forged reflection records, report/export breakouts, record floods
                              (each test of those modules is one attack: passed = contained)
"""

from __future__ import annotations

import json
import os
import re
import resource
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.hardening.attacks import ATTACK_FRAMES, HOSTILE_DIR, RAW, SECRET, Targets
from dspy_adaptive.sandbox import Layers, SandboxPool, SpecialistError, compile_program
from dspy_adaptive.sandbox.isolation import compile_seccomp, landlock_abi
from dspy_adaptive.sandbox.testing import FakeBridge, run_bypassing_policy, run_unchecked, unchecked

ROOT_DIR = Path(__file__).resolve().parents[2]
HOSTILE = sorted(HOSTILE_DIR.glob("*.py"))
TRIVIAL = compile_program(
    "class S(dspy.Module):\n    def forward(self, x):\n        return dspy.Prediction(answer=x)\n").program
CLASSES = ("rejected", "contained", "escaped", "host-broken", "host-hung")


@dataclass
class Row:
    family: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))
    notes: list[str] = field(default_factory=list)

    @property
    def tried(self) -> int:
        return sum(self.counts.values())

    def add(self, outcome: str, note: str = "") -> None:
        self.counts[outcome] += 1
        if note and outcome in ("escaped", "host-broken", "host-hung"):
            self.notes.append(note)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _guarded(fn, pool: SandboxPool) -> tuple[str, object, str]:
    """Run one attack; return (outcome so far, result, note)."""
    cpu0, rss0 = time.process_time(), _rss_mb()
    try:
        out = fn()
    except SpecialistError as e:
        out = e
    except Exception as e:  # noqa: BLE001 - the host raised: host-broken
        return "host-broken", e, f"host raised {type(e).__name__}: {str(e)[:200]}"
    cpu, rss = time.process_time() - cpu0, _rss_mb() - rss0
    if cpu > 1.0 or rss > 64:
        return "host-broken", out, f"host spent {cpu:.1f}s CPU / {rss:.0f} MB for one call"
    try:
        assert pool.run(TRIVIAL, {"x": 1}, FakeBridge()) == {"answer": 1}
    except Exception as e:  # noqa: BLE001
        return "host-broken", out, f"the pool no longer serves ({type(e).__name__}: {e})"
    return "ok", out, ""


class Canary:
    """Host state an attack could change: a file, a directory's listing, the working directory."""

    def __init__(self, tmp: Path):
        self.dir = tmp / "canary"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.file = self.dir / "canary.txt"
        self.file.write_text("original")
        self.cwd_before = set(os.listdir(Path.cwd()))

    def changed(self) -> str:
        if self.file.read_text() != "original":
            return "canary file changed"
        if sorted(os.listdir(self.dir)) != ["canary.txt"]:
            return f"files appeared next to the canary: {os.listdir(self.dir)}"
        if set(os.listdir(Path.cwd())) != self.cwd_before:
            return "the host's working directory changed"
        if Path("/tmp/pwned").exists():
            return "/tmp/pwned exists"
        return ""


def _leaked(out: object) -> bool:
    text = repr(out)
    if isinstance(out, SpecialistError):
        text += out.reason + out.stdout
    return SECRET in text


def corpus_rows(tmp: Path) -> list[Row]:
    canary = Canary(tmp)
    inputs = {"canary": str(canary.file)}
    rows = [Row("corpus, all layers"), Row("corpus, policy only"), Row("corpus, policy bypassed")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        full = SandboxPool(max_workers=2, timeout=1.5, memory_mb=256, max_predictor_calls=20, tool_names=("search",))
        bare = SandboxPool(max_workers=2, timeout=1.5, memory_mb=256, max_predictor_calls=20, tool_names=("search",),
                           layers=Layers.none())
        try:
            for path in HOSTILE:
                src = path.read_text()
                expect = dict(re.findall(r"^# (expect): (.+)$", src, re.M)).get("expect")
                res = compile_program(src)
                for row, pool in ((rows[0], full), (rows[1], bare)):
                    if pool is bare and path.stem in ("memory_bomb", "memory_bomb_gradual"):
                        continue   # memory is the rlimits' class: without them it would exhaust the host
                    if not res.ok:
                        row.add("rejected")
                        continue
                    state, out, note = _guarded(lambda p=pool, r=res: p.run(r.program, inputs, FakeBridge()), pool)
                    _classify(row, state, out, note, canary, path.stem)
                if not res.ok and expect == "rejected":
                    def bypass(s=src):
                        return run_bypassing_policy(full, s, inputs, FakeBridge())
                    state, out, note = _guarded(bypass, full)
                    _classify(rows[2], state, out, note, canary, path.stem)
        finally:
            full.close()
            bare.close()
    return rows


def _classify(row: Row, state: str, out: object, note: str, canary: Canary, name: str) -> None:
    if state == "host-broken":
        row.add("host-broken", f"{name}: {note}")
    elif _leaked(out):
        row.add("escaped", f"{name}: the secret came back")
    elif canary.changed():
        row.add("escaped", f"{name}: {canary.changed()}")
    else:
        row.add("contained")


def os_rows(tmp: Path) -> list[Row]:
    (tmp / "targets").mkdir(parents=True, exist_ok=True)
    targets = Targets(tmp / "targets")
    abi, sec, root = landlock_abi(), compile_seccomp()[0] is not None, os.getuid() == 0
    # what each layer alone is responsible for (its class), on this host
    classes = {
        "seccomp": {"read_secret", "read_parent_environ", "list_root", "write_tmp", "mkdir_tmp", "tcp_connect",
                    "unix_abstract", "signal_host", "fork"} if sec else set(),
        "landlock": ({"read_secret", "read_parent_environ", "list_root", "write_tmp", "mkdir_tmp"}
                     | ({"tcp_connect"} if abi >= 4 else set())
                     | ({"unix_abstract", "signal_host"} if abi >= 6 else set())) if abi else set(),
        "uid": {"read_secret", "read_parent_environ", "signal_host"} if root else set(),
        "netns": {"tcp_connect", "unix_abstract"} if root else set(),
    }
    everything = set().union(*classes.values()) | {"write_tmp"}
    rows = []
    try:
        for label, layers, expected in [("OS attacks, full Python, all layers", Layers(), everything)] + [
                (f"OS attacks, full Python, {name} alone", Layers.only(name), cls)
                for name, cls in classes.items() if cls]:
            row = Row(label)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                pool = SandboxPool(max_workers=1, timeout=5, memory_mb=512, layers=layers)
                try:
                    received = len(targets.received)
                    state, out, note = _guarded(lambda p=pool: run_unchecked(p, targets.source(), {}), pool)
                finally:
                    pool.close()
            if state == "host-broken" or not hasattr(out, "outputs"):
                row.add("host-broken", f"{label}: {note or out}")
                rows.append(row)
                continue
            res = out.outputs
            for attack in sorted(expected):
                hit = not str(res.get(attack, "")).startswith("denied")
                row.add("escaped" if hit else "contained", f"{label}: {attack} -> {res.get(attack)}")
            if len(targets.received) > received and "tcp_connect" in expected:
                row.add("escaped", f"{label}: a host listener received data")
            if SECRET in json.dumps(res):
                row.add("escaped", f"{label}: the secret came back")
            rows.append(row)
    finally:
        targets.close()
    return rows


def bridge_row() -> Row:
    row = Row("bridge, raw frames (no policy, no OS layer)")
    bridge = FakeBridge()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        pool = SandboxPool(max_workers=1, timeout=10, tool_names=("search",), layers=Layers.none())
        try:
            src = unchecked(RAW.replace("MESSAGES", repr(ATTACK_FRAMES)))
            state, out, note = _guarded(lambda: run_unchecked(pool, src, {}, bridge), pool)
        finally:
            pool.close()
    if state == "host-broken" or not hasattr(out, "outputs"):
        row.add("host-broken", note or repr(out))
        return row
    for frame, reply in zip(ATTACK_FRAMES, out.outputs["replies"]):
        if reply.get("ok"):
            row.add("escaped", f"served: {json.dumps(frame)[:120]}")
        elif SECRET in json.dumps(reply):
            row.add("escaped", "a refusal carried the secret")
        else:
            row.add("rejected")
    if bridge.calls or bridge.tool_calls:
        row.add("escaped", f"the bridge was called: {bridge.calls[:1]} {bridge.tool_calls[:1]}")
    return row


DOWNSTREAM_TESTS = ("tests/tasks/test_hostile_outputs.py", "tests/tasks/ifeval/test_adversarial.py",
                    "tests/core/test_reflection_prompt.py", "tests/plots/test_hostile_report.py",
                    "tests/core/test_record_bounds.py")


def downstream_row() -> Row:
    """Each attack of the downstream test modules, run through pytest: passed = contained."""
    import pytest

    row = Row("downstream of the sandbox (outputs as hostile input)")

    class Collect:
        def pytest_runtest_logreport(self, report):
            if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
                if report.outcome == "passed":
                    row.add("contained")
                elif report.outcome == "failed":
                    row.add("escaped", f"{report.nodeid}: {str(report.longrepr)[-300:]}")

    pytest.main([str(ROOT_DIR / t) for t in DOWNSTREAM_TESTS] + ["-qq", "-p", "no:cacheprovider", "--no-header",
                "-o", "addopts=", "--import-mode=importlib", "--rootdir", str(ROOT_DIR)], plugins=[Collect()])
    return row


def run_red_team(tmp: Path, downstream: bool = True) -> list[Row]:
    """Every family; `downstream=False` leaves out the downstream modules (the test suite runs them itself)."""
    old = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = SECRET
    try:
        return corpus_rows(tmp) + os_rows(tmp) + [bridge_row()] + ([downstream_row()] if downstream else [])
    finally:
        if old is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = old
