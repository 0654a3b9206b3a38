"""OS isolation, one layer at a time, each with the static policy AND RestrictedPython switched off
(`pool._run_unchecked`: full builtins, real `os` and `socket`) and every other OS layer switched off:
each layer alone must stop its class of attack. Then all layers together stop all of them.

The attacker's targets are real: a root-only file, the parent's environment, a TCP listener and an
abstract unix socket in the host's network namespace, the host process itself (signal 0), fork, files
in /tmp, and exec.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from benchmarks.hardening.attacks import SECRET, Targets
from dspy_adaptive.sandbox import Layers, SandboxPool, SpecialistError
from dspy_adaptive.sandbox.isolation import compile_seccomp, landlock_abi
from dspy_adaptive.sandbox.testing import run_unchecked

ROOT = os.getuid() == 0
ABI = landlock_abi()
SECCOMP = compile_seccomp()[0] is not None


@pytest.fixture
def targets(tmp_path):
    t = Targets(tmp_path)
    yield t
    t.close()


def attack(layers: Layers, targets: Targets) -> dict[str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # "layers switched off" is the point here
        with SandboxPool(max_workers=1, timeout=5, memory_mb=512, layers=layers) as p:
            out = run_unchecked(p, targets.source(), {}).outputs
    assert SECRET not in repr(out)
    return out


def denied(out: dict[str, str], *names: str) -> None:
    for n in names:
        assert out[n].startswith("denied"), (n, out[n])


def test_without_any_os_layer_the_attacks_work(targets):
    """The control: with every OS layer off (and the policy off), the attacks succeed -- so what the
    tests below see is the layer under test, not a broken attack."""
    out = attack(Layers.none(), targets)
    assert out["list_root"] == "ok" and out["tcp_connect"] == "ok" and out["fork"] == "ok"
    assert out["signal_host"] == "ok" and out["write_tmp"] == "ok"
    if ROOT:
        assert out["read_secret"] == "ok"


@pytest.mark.skipif(not SECCOMP, reason="libseccomp unavailable")
def test_seccomp_alone(targets):
    out = attack(Layers.only("seccomp"), targets)
    denied(out, "read_secret", "read_parent_environ", "list_root", "write_tmp", "mkdir_tmp", "tcp_connect",
           "unix_abstract", "signal_host", "fork")
    assert targets.received == [] and not Path(targets.tmp_file).exists()


@pytest.mark.skipif(not ABI, reason="Landlock unavailable")
def test_landlock_alone(targets):
    out = attack(Layers.only("landlock"), targets)
    denied(out, "read_secret", "read_parent_environ", "list_root", "write_tmp", "mkdir_tmp")
    if ABI >= 4:
        denied(out, "tcp_connect")
    if ABI >= 6:
        denied(out, "unix_abstract", "signal_host")
    assert out["fork"] == "ok"            # not its class: processes are seccomp's and the rlimits'
    assert not Path(targets.tmp_file).exists()
    assert targets.received == [] or ABI < 6


@pytest.mark.skipif(not ROOT, reason="per-worker uids need a root host")
def test_uid_alone(targets):
    out = attack(Layers.only("uid"), targets)
    denied(out, "read_secret", "read_parent_environ", "signal_host")
    assert out["tcp_connect"] == "ok"     # not its class: the network is the namespace's and Landlock's


@pytest.mark.skipif(not ROOT, reason="a network namespace needs a root host")
def test_netns_alone(targets):
    out = attack(Layers.only("netns"), targets)
    denied(out, "tcp_connect", "unix_abstract")
    assert targets.received == []
    assert out["list_root"] == "ok"       # not its class


def test_rlimits_alone(targets):
    out = attack(Layers.only("rlimits"), targets)
    assert "EFBIG" in out["write_tmp"] or "File too large" in out["write_tmp"]   # RLIMIT_FSIZE=0
    assert not Path(targets.tmp_file).exists() or Path(targets.tmp_file).stat().st_size == 0
    if not ROOT:                          # root ignores RLIMIT_NPROC; the uid layer makes it count
        denied(out, "fork")
    with warnings.catch_warnings(), SandboxPool(max_workers=1, timeout=3, memory_mb=256,
                                                 layers=Layers.only("rlimits")) as p:
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(SpecialistError) as ei:
            run_unchecked(p, "class Solver(dspy.Module):\n    def forward(self):\n"
                             "        x = bytearray(600 * 1024 * 1024)\n        return dspy.Prediction(n=len(x))\n", {})
        assert ei.value.kind == "memory"


def test_all_layers_together(targets):
    out = attack(Layers(), targets)
    must = ["write_tmp", "mkdir_tmp"]
    if SECCOMP or ABI:
        must += ["read_secret", "read_parent_environ", "list_root", "tcp_connect"]
    if SECCOMP or ROOT:
        must += ["unix_abstract", "signal_host", "fork"]
    denied(out, *must)
    assert targets.received == [] and not Path(targets.tmp_file).exists()


@pytest.mark.parametrize("layer", [n for n, ok in (("seccomp", SECCOMP), ("landlock", ABI)) if ok])
def test_exec_is_stopped(layer, targets):
    """exec comes last, outside the try: if it worked, the worker would turn into /bin/sh and exit 0
    (a crash with exit code 0); denied, it raises PermissionError inside the specialist."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with SandboxPool(max_workers=1, timeout=5, layers=Layers.only(layer)) as p:
            with pytest.raises(SpecialistError) as ei:
                run_unchecked(p, targets.source(do_exec=True), {})
    assert ei.value.kind == "exception" and ei.value.reason.startswith("PermissionError"), ei.value


def test_exec_works_without_the_layers(targets):
    """The control for the test above."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with SandboxPool(max_workers=1, timeout=5, layers=Layers.none()) as p:
            with pytest.raises(SpecialistError) as ei:
                run_unchecked(p, targets.source(do_exec=True), {})
    assert ei.value.kind == "crash" and "exit code 0" in ei.value.reason
