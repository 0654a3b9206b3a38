"""OS isolation of a sandbox worker: the layer that must hold after a Python-level escape.

Each mechanism is the kernel's own, maintained outside this project; this module only switches
them on, in this order, in a freshly forked worker before the first byte of specialist code runs:

1. rlimits      memory (RLIMIT_AS), CPU, no file writes (RLIMIT_FSIZE=0), no new processes or
                threads (RLIMIT_NPROC=0), few descriptors, no core dumps;
2. uid          when the host runs as root: setgroups([]) + a uid/gid of its own, distinct per
                worker and owning nothing, so it cannot signal or read anything of another process;
3. landlock     (Linux >= 5.13) a ruleset that handles every filesystem right and grants none (no
                file can be opened, executed, created or listed), no TCP bind/connect (ABI >= 4),
                and no signals or abstract unix sockets outside the worker (ABI >= 6);
4. seccomp      an allow-list of the ~50 system calls a pre-imported interpreter needs to compute
                and talk over its two pipes, compiled once on the host by libseccomp (through
                pyseccomp's ctypes binding) and loaded by each worker; every other call fails with
                EPERM: open*, socket, connect, execve, fork/clone, kill, ptrace, process_vm_*,
                mount, unshare, bpf, ...
5. netns        (host root only, applied once to the zygote) an empty network namespace with no
                interfaces, and an IPC namespace of its own, inherited by every worker.

`probe()` says which of these this host offers; `Layers` selects which to apply (tests switch all
but one off to show that one alone stops its class of attack). Missing mechanisms are reported at
start-up and in the run record; `isolation="strict"` refuses to run without them (pool.py).

Standalone (stdlib; pyseccomp on the host only): the zygote and workers import it as a top-level module.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
import sys

NOBODY = 65534

# ------------------------------------------------------------------------------------------ libc
_libc = None
_CALLS: dict = {}   # prctl and syscall with their argument types, set up once (the zygote) for every worker


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        prctl = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                                 ctypes.c_ulong, use_errno=True)(("prctl", _libc))
        _CALLS["prctl"] = prctl
    return _libc


def trim_heap() -> None:
    """Give free malloc memory back to the kernel (glibc's malloc_trim), so a fork has fewer pages to copy."""
    try:
        libc().malloc_trim(0)
    except (AttributeError, OSError):
        pass


def _prctl(option: int, a: int = 0, b: int = 0, c: int = 0, d: int = 0) -> int:
    """prctl(2) with plain integers (a forked worker makes these calls: few Python objects touched)."""
    libc()
    return _CALLS["prctl"](option, a, b, c, d)


def _check(rc: int, what: str) -> int:
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return rc


PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None) -> bool:
    """SIGKILL this process when its parent (the zygote) dies; exit now if it already has. Must run after
    the uid change (which clears the parent-death signal). False where prctl is unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    _check(_prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL)), "prctl(PR_SET_PDEATHSIG)")
    if parent is not None and os.getppid() != parent:
        os._exit(1)
    return True


class _SigEvent(ctypes.Structure):
    _fields_ = [("sigev_value", ctypes.c_void_p), ("sigev_signo", ctypes.c_int), ("sigev_notify", ctypes.c_int),
                ("_pad", ctypes.c_int * 12)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


CLOCK_MONOTONIC, SIGEV_SIGNAL = 1, 0


_TIMER: dict = {}   # the lifetime timer's C functions and structures, made once (the zygote) for every worker


def prepare_timer() -> None:
    """Look up timer_create/timer_settime and build their arguments now, so a forked worker only fills in a
    number and makes two calls (fewer Python objects touched after the fork)."""
    if _TIMER or not sys.platform.startswith("linux"):
        return
    try:
        lib = libc()
        create, settime = lib.timer_create, lib.timer_settime
    except (AttributeError, OSError):
        return
    sev = _SigEvent(None, int(signal.SIGKILL), SIGEV_SIGNAL)
    tid, spec = ctypes.c_void_p(0), _ITimerSpec(_Timespec(0, 0), _Timespec(0, 0))
    _TIMER.update(create=create, settime=settime, sev=ctypes.byref(sev), tid=tid, tid_ref=ctypes.byref(tid),
                  spec=spec, spec_ref=ctypes.byref(spec), keep=(sev,))


def arm_lifetime(seconds: float) -> str:
    """A wall-clock limit of the process's own: a POSIX timer that sends SIGKILL after `seconds` -- which no
    signal mask or handler can stop, and which only timer_settime/timer_delete could disarm, system calls
    seccomp then refuses. Where that timer is unavailable, SIGALRM (default action: terminate) via
    setitimer. Returns which one was armed."""
    seconds = max(0.001, float(seconds))
    prepare_timer()
    t = _TIMER
    if t and t["create"](CLOCK_MONOTONIC, t["sev"], t["tid_ref"]) == 0:
        whole = int(seconds)
        t["spec"].it_value.tv_sec, t["spec"].it_value.tv_nsec = whole, int((seconds - whole) * 1e9)
        if t["settime"](t["tid"], 0, t["spec_ref"], None) == 0:
            return "sigkill-timer"
    signal.setitimer(signal.ITIMER_REAL, seconds)
    return "sigalrm"


_NNP = [False]


def no_new_privs() -> None:
    if not _NNP[0]:
        _check(_prctl(PR_SET_NO_NEW_PRIVS, 1), "prctl(PR_SET_NO_NEW_PRIVS)")
        _NNP[0] = True


# ------------------------------------------------------------------------------------------ landlock
# Kernel ABI (include/uapi/linux/landlock.h). No maintained Python binding covers the network and
# scope rights (PyPI's `landlock` 1.0.0.dev5 handles filesystem rights only), so the three system
# calls are made directly.
_SYS_CREATE_RULESET, _SYS_RESTRICT_SELF = 444, 446
_CREATE_RULESET_VERSION = 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 if Landlock is unavailable (not Linux, too old, disabled)."""
    if not sys.platform.startswith("linux") or os.uname().machine not in ("x86_64", "aarch64"):
        return 0
    rc = libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(rc) if rc > 0 else 0


def _landlock_rights(abi: int) -> tuple[int, int, int, int]:
    fs = (1 << 13) - 1                       # ABI 1: EXECUTE ... MAKE_SYM
    if abi >= 2:
        fs |= 1 << 13                        # REFER
    if abi >= 3:
        fs |= 1 << 14                        # TRUNCATE
    if abi >= 5:
        fs |= 1 << 15                        # IOCTL_DEV
    net = 0b11 if abi >= 4 else 0            # BIND_TCP | CONNECT_TCP
    scoped = 0b11 if abi >= 6 else 0         # ABSTRACT_UNIX_SOCKET | SIGNAL
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    return fs, net, scoped, size


_RULESET: dict[int, int] = {}   # abi -> ruleset fd made by the zygote, inherited by every worker


def _create_ruleset(abi: int) -> int:
    fs, net, scoped, size = _landlock_rights(abi)
    attr = _RulesetAttr(fs, net, scoped)
    return _check(libc().syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)),
                  "landlock_create_ruleset")


def inherited_fds() -> list[int]:
    """Descriptors a forked worker must keep from the zygote (the prepared Landlock rulesets)."""
    return list(_RULESET.values())


def prepare_landlock(abi: int) -> None:
    """Create the ruleset once (the zygote); each forked worker only restricts itself with it."""
    if abi > 0 and abi not in _RULESET:
        _RULESET[abi] = _create_ruleset(abi)


def apply_landlock(abi: int) -> None:
    """Deny every filesystem right (and TCP, and signals/abstract sockets leaving the worker, where
    the ABI has them) with no exception: the ruleset grants nothing."""
    fd = _RULESET.pop(abi, None)
    if fd is None:
        fd = _create_ruleset(abi)
    try:
        no_new_privs()
        _check(libc().syscall(_SYS_RESTRICT_SELF, fd, 0), "landlock_restrict_self")
    finally:
        os.close(fd)
    for other in list(_RULESET.values()):   # a worker keeps no inherited ruleset descriptor
        os.close(other)
    _RULESET.clear()


# ------------------------------------------------------------------------------------------ seccomp
#: What a forked, pre-imported worker needs: compute, allocate, talk over its two pipes, tell time,
#: and exit. Names missing on an architecture are skipped.
SECCOMP_ALLOW = (
    "read", "write", "readv", "writev", "close", "lseek",
    "brk", "mmap", "munmap", "mremap", "madvise", "mprotect",
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "restart_syscall",
    "futex", "sched_yield", "sched_getaffinity", "rseq", "set_robust_list",
    "getpid", "gettid", "getppid", "getpgrp", "getpgid", "getsid", "getuid", "geteuid", "getgid", "getegid",
    "getresuid", "getresgid", "getgroups", "getrusage", "getrlimit",
    "clock_gettime", "clock_getres", "gettimeofday", "time", "nanosleep", "clock_nanosleep",
    "select", "pselect6", "poll", "ppoll", "getrandom", "fstat", "getcwd", "uname",
    "exit", "exit_group",
)

_BPF: list = [None]     # the compiled filter this process loads into its workers (set_seccomp_program)
_COMPILED: dict = {}


def compile_seccomp() -> tuple[bytes | None, str]:
    """(BPF program, "") or (None, why not): libseccomp compiles the allow-list once, on the host; the
    zygote and every worker only load the compiled program (one prctl), so they never load libseccomp
    (~1.7 MB of their image and ~0.5 ms per worker of libseccomp's own load)."""
    if "bpf" in _COMPILED:
        return _COMPILED["bpf"], _COMPILED["why"]
    bpf, why = None, ""
    if not sys.platform.startswith("linux"):
        why = "seccomp is Linux-only"
    else:
        try:
            import pyseccomp
        except Exception as e:  # noqa: BLE001 - missing package or libseccomp.so
            why = f"pyseccomp/libseccomp unavailable ({type(e).__name__}: {e})"
        else:
            f = pyseccomp.SyscallFilter(pyseccomp.ERRNO(errno.EPERM))
            try:    # a binary tree of the syscall numbers, not a list: the kernel emulates the filter for every
                f.set_attr(pyseccomp.Attr.CTL_OPTIMIZE, 2)   # syscall when a worker attaches it (its action
            except (OSError, ValueError, AttributeError):    # cache), which took 180 us a worker, now 120
                pass    # (libseccomp < 2.5: the list; the same rules either way)
            for name in SECCOMP_ALLOW:
                try:
                    f.add_rule(pyseccomp.ALLOW, name)
                except (OSError, ValueError):   # not a system call on this architecture
                    pass
            # getrlimit() is prlimit64(0, resource, NULL, &old): reading its own limits only, never setting
            # them and never another process's
            f.add_rule(pyseccomp.ALLOW, "prlimit64", pyseccomp.Arg(0, pyseccomp.EQ, 0),
                       pyseccomp.Arg(2, pyseccomp.EQ, 0))
            bpf = _export_bpf(f)
            if bpf is None:
                why = "libseccomp could not export the filter"
    _COMPILED.update(bpf=bpf, why=why)
    return bpf, why


def _export_bpf(f) -> bytes | None:
    r, w = os.pipe()
    try:
        with os.fdopen(w, "wb", closefd=True) as out:
            f.export_bpf(out)
        chunks = []
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            chunks.append(b)
        data = b"".join(chunks)
        return data if data and len(data) % 8 == 0 else None
    except Exception:  # noqa: BLE001
        return None
    finally:
        os.close(r)


_FPROG: list = [None]   # the filter as the kernel takes it (struct sock_fprog), built once per process


def set_seccomp_program(bpf: bytes | None) -> None:
    """The compiled filter this process (a zygote, or a spawned worker) applies to its workers."""
    _BPF[0] = bpf
    _FPROG[0] = None
    if bpf:
        n = len(bpf) // 8
        prog = (_SockFilter * n).from_buffer_copy(bpf)
        _FPROG[0] = (_SockFprog(n, ctypes.cast(prog, ctypes.POINTER(_SockFilter))), prog)


PR_GET_SECCOMP, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 21, 22, 2


def seccomp_kernel_ok() -> bool:
    """The kernel supports seccomp filters (prctl(PR_GET_SECCOMP) answers instead of EINVAL)."""
    if not sys.platform.startswith("linux"):
        return False
    return _prctl(PR_GET_SECCOMP) >= 0


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def apply_seccomp() -> None:
    if not _BPF[0] or _FPROG[0] is None:
        raise OSError("no seccomp program was provided to this process")
    no_new_privs()
    _check(_prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(_FPROG[0][0])), "prctl(PR_SET_SECCOMP)")


# ------------------------------------------------------------------------------------------ namespaces
CLONE_NEWNET, CLONE_NEWIPC = 0x40000000, 0x08000000


def enter_empty_netns() -> None:
    """Move this process (the zygote) into new, empty network and IPC namespaces. Needs CAP_SYS_ADMIN."""
    _check(libc().unshare(CLONE_NEWNET | CLONE_NEWIPC), "unshare(CLONE_NEWNET | CLONE_NEWIPC)")


# ------------------------------------------------------------------------------------------ probe
def probe() -> dict[str, object]:
    """What this process could apply to its workers: {"landlock_abi": int, "seccomp": bool,
    "uid": bool, "netns": bool, "reasons": {layer: why not}}. Changes nothing. seccomp counts as available
    once a compiled program was set (set_seccomp_program) and the kernel supports filters."""
    reasons: dict[str, str] = {}
    abi = landlock_abi()
    if not abi:
        reasons["landlock"] = ("Landlock is unavailable (needs Linux >= 5.13 with Landlock enabled)"
                               if sys.platform.startswith("linux") else "Landlock is Linux-only")
    sec = bool(_BPF[0]) and seccomp_kernel_ok()
    if not sec:
        reasons["seccomp"] = ("no compiled seccomp program (libseccomp missing on the host?)" if not _BPF[0]
                              else "the kernel has no seccomp filter support")
    root = hasattr(os, "getuid") and os.getuid() == 0
    if not root:
        reasons["uid"] = "the host does not run as root, so workers keep the host's uid"
        reasons["netns"] = "a network namespace needs root (workers are kept off the network by Landlock/seccomp)"
    return {"landlock_abi": abi, "seccomp": sec, "uid": root, "netns": root and sys.platform.startswith("linux"),
            "reasons": reasons}


# ------------------------------------------------------------------------------------------ confine
def set_rlimits(memory_mb: int, cpu_seconds: int, nofile: int) -> None:
    if signal.getsignal(signal.SIGXFSZ) is not signal.SIG_IGN:   # (the zygote set it for all its workers)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # writes past RLIMIT_FSIZE raise EFBIG instead
    mem = int(memory_mb) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(used.ru_utime + used.ru_stime + cpu_seconds) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))


def drop_privileges(uid: int) -> None:
    """setgroups([]) + setgid/setuid to `uid` (root only); irreversible, verified."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid):   # saved ids too: irreversible
        raise SystemExit("privilege drop failed")


def confine(cfg: dict, fds: tuple[int, ...]) -> dict[str, bool]:
    """Apply the layers `cfg["layers"]` selects, in order; return what was applied. A layer that is
    selected but fails to apply raises: the worker must not serve with less than it was asked for.
    Whatever the layers, the worker gets a wall-clock limit of its own (`cfg["lifetime"]`) and, when
    forked by the zygote (`cfg["parent"]`), dies with it."""
    layers = cfg.get("layers") or {}
    applied = {"rlimits": False, "uid": False, "landlock": False, "seccomp": False}
    if cfg.get("lifetime"):
        arm_lifetime(float(cfg["lifetime"]))
    if layers.get("rlimits", True):
        set_rlimits(int(cfg["memory_mb"]), int(cfg.get("cpu_seconds", 30)), max(max(fds) + 1, 8))
        applied["rlimits"] = True
    if layers.get("uid", True) and os.getuid() == 0:
        drop_privileges(int(cfg.get("uid") or NOBODY))
        applied["uid"] = True
    if cfg.get("parent"):
        die_with_parent(int(cfg["parent"]))
    if layers.get("landlock", True) and int(cfg.get("landlock_abi", 0)) > 0:
        apply_landlock(int(cfg["landlock_abi"]))
        applied["landlock"] = True
    if layers.get("seccomp", True) and cfg.get("seccomp"):
        apply_seccomp()
        applied["seccomp"] = True
    return applied
