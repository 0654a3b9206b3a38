"""Runtime failure of a compiled specialist (never rerouted by the caller)."""

from __future__ import annotations

KINDS = ("exception", "timeout", "memory", "crash", "output", "policy", "protocol", "predictor_limit")


class SpecialistError(RuntimeError):
    """A compiled specialist failed at run time.

    reason: specific and human-readable ("timeout after 2.0s", "memory limit (256 MB) exceeded",
            "NameError: name 'open' is not defined (line 5)", ...). Safe to show to reflection.
    kind:   one of KINDS.
    stdout: what the specialist printed before failing (capped), or "".
    If the failure was an uncaught exception raised by the host bridge, the original host
    exception is chained as __cause__.
    """

    def __init__(self, reason: str, kind: str = "exception", *, stdout: str = ""):
        if kind not in KINDS:
            raise ValueError(f"unknown SpecialistError kind {kind!r}")
        super().__init__(f"[{kind}] {reason}")
        self.reason = reason
        self.kind = kind
        self.stdout = stdout

    def __reduce__(self):
        return (_rebuild, (self.reason, self.kind, self.stdout))


def _rebuild(reason: str, kind: str, stdout: str) -> SpecialistError:
    return SpecialistError(reason, kind, stdout=stdout)
