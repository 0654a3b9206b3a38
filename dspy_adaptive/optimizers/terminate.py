"""SIGTERM stops a run as Ctrl-C does.

`timeout`, `kill`, a batch scheduler or a container stop send SIGTERM, whose default action ends Python at once:
no `finally` runs, the progress bar and the tracker are left open, and a command cannot say what happened. While a
run is assembled (`AssembledRun` enters `sigterm_as_interrupt`), SIGTERM raises `Terminated` -- a
KeyboardInterrupt -- in the main thread instead, so the run stops exactly as on Ctrl-C: the rows still running are
dropped, every scored call already logged stays in the log_dir, and rerunning the same call resumes. Further
SIGTERMs while it stops are ignored (the first one is already being served). A handler the application installed
itself is left alone, and outside the main thread nothing is changed (Python delivers signals there only).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM: handled as Ctrl-C's KeyboardInterrupt is."""


def _raise_terminated(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)      # one stop is enough: later SIGTERMs do not cut the cleanup
    raise Terminated("terminated by SIGTERM")


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[bool]:
    """While inside, SIGTERM raises `Terminated` in the main thread (see the module docstring). Yields whether the
    handler was installed."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM") \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield False
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield True
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


__all__ = ["Terminated", "sigterm_as_interrupt"]
