"""Checkpoint and resume -- the one resume of both optimizers: nothing committed is lost, no scored call is
forgotten, none is charged twice.

Files in log_dir:

* `identity.json`: what makes the run (program, data, settings, LMs, ...), written before its first scored
  call. A rerun with anything different is refused, naming what differs (`ResumeMismatchError`).
* `state.json`: the committed state (the optimizer's own dict, with `committed`: the work units -- iterations,
  turns -- folded into it). Replaced atomically (temp file, fsync, rename).
* `evals.jsonl`: an append-only log of every scored call as it completes, tagged with its work unit, the
  candidate's content hash and its budget kind; flushed at once, so a kill hides nothing.
* `routes.jsonl`: an append-only log of the router decisions the run's memo learnt (`program.route_memo`), so a
  resumed run does not ask the router again for what the interrupted session paid for.

On resume (`CheckpointStore.open`) the route log refills the memo (`Resume.routes`), and the eval log splits
in two: calls of committed units (already in the state's budget) and *pending* calls, made by units the
interruption cut off. Pending calls were paid for: they are charged again to the budget at once (so a resumed
run never exceeds its budget), and kept as a `Replay`: when the resumed run scores the same candidate on the
same row for the same unit -- the cut-off unit redone, as a seeded run redoes it -- the logged result is used
instead of running the row again. A pending call no redone unit asks for is counted as lost (`Replay.expire`):
charged, its result unused.

* `run.lock`: whose the folder is. `open` takes it (`DirLock`) before it reads anything, and the run holds it
  until its record is written (`release`): a second run into the same folder while the first lives is refused
  at once (`LogDirInUseError`), before any LM call, and changes nothing there. A killed run leaves it unlocked.
"""

from __future__ import annotations

import datetime
import errno
import json
import os
import socket
import threading
import warnings
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from dspy_adaptive.data import InputError
from dspy_adaptive.program.route_memo import Decision, MemoKey
from dspy_adaptive.schema import BUDGET_KINDS, RowResult

try:
    import fcntl
except ImportError:      # not POSIX (Windows): DirLock is a documented no-op there
    fcntl = None  # type: ignore[assignment]

STATE = "state.json"
EVALS = "evals.jsonl"
ROUTES = "routes.jsonl"
IDENTITY = "identity.json"
LOCK = "run.lock"
#: The layout of state.json and evals.jsonl this code writes and reads; another version is refused on load.
STATE_VERSION = 2


class ResumeMismatchError(InputError):
    """log_dir holds another run (other program, data, settings or LMs): it is not resumed silently.
    `differences`: what differs, one line each (`merge.enabled: was true, now false`); empty when the files are
    of another layout version."""

    differences: tuple[str, ...] = ()

    @classmethod
    def listing(cls, differences: list[str], message: str) -> "ResumeMismatchError":
        err = cls(message)
        err.differences = tuple(differences)
        return err


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


class LogDirInUseError(InputError):
    """Another run, still alive, holds the folder (its `run.lock`): this one is refused before any LM call.
    `holder`: what that run wrote into the lock file (pid, host, started, what), {} when not known."""

    holder: Mapping[str, Any] = {}


class DirLock:
    """A run's ownership of its folder, for as long as the run lasts: an exclusive OS advisory lock
    (`fcntl.flock`) on `run.lock` inside the folder, held by an open file descriptor; `release` (or leaving the
    `with` block) ends it.

    Why a lock rather than a pid file: the kernel drops a flock when the last descriptor on it closes, so a run
    that ends in any way -- normally, on an exception, on Ctrl-C, or killed outright (kill -9, the OOM killer) --
    leaves its folder free, and a live run always holds it. A pid file outlives a killed run, and telling a stale
    one from a live one means guessing (a reused pid, another host on a shared disk, a container's pid
    namespace). The lock file is never deleted (deleting it would let two runs lock two different files); the
    holder writes its pid, host and start time into it only so that a refused run can say who holds the folder.

    Limits: the lock is advisory (only this package's runs take it); the descriptor is not inherited by child
    processes (Python opens files non-inheritable), so a run's sandbox workers do not keep it alive after the run;
    two descriptors in one process exclude each other too (flock, unlike POSIX record locks). Where `fcntl` is
    missing (Windows) this is a no-op -- the folder is not protected -- and where the file system refuses
    flock (some network mounts) the run goes on unprotected with a warning, rather than fail."""

    def __init__(self, path: Path, file: Any = None):
        self.path = path
        self._file = file

    @classmethod
    def acquire(cls, directory: str | Path, *, what: str = "run", option: str = "log_dir") -> "DirLock":
        """Lock `directory` (which must exist) for this run, or raise `LogDirInUseError` naming the holder, in the
        words of `what` ("search", "demo run") and `option` (how the user named the folder: "log_dir", "--out")."""
        path = Path(directory) / LOCK
        if fcntl is None:
            return cls(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)     # never truncated before the lock is ours
        f = os.fdopen(fd, "r+", encoding="utf-8")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                f.close()
                warnings.warn(f"{option} {str(directory)!r} cannot be locked ({e}): another run into it will not be "
                              "refused", RuntimeWarning, stacklevel=2)
                return cls(path)
            text = f.read()
            f.close()
            raise cls._in_use(directory, text, what, option) from None
        try:
            f.seek(0)
            f.truncate()
            f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "what": what,
                                "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}))
            f.flush()
        except OSError:
            pass                  # who holds it is only for the message; the lock is what counts
        return cls(path, f)

    @staticmethod
    def _in_use(directory: str | Path, text: str, what: str, option: str) -> LogDirInUseError:
        try:
            holder = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError:
            holder = {}
        holder = holder if isinstance(holder, dict) else {}
        who = [f"pid {holder['pid']}" + (" (this process)" if holder.get("pid") == os.getpid()
                                         and holder.get("host") == socket.gethostname() else "")
               if holder.get("pid") else "", f"on {holder['host']}" if holder.get("host") else "",
               f"since {holder['started']}" if holder.get("started") else ""]
        who_text = " ".join(w for w in who if w) or "pid not known yet: it is just starting"
        err = LogDirInUseError(
            f"{option} {str(directory)!r} is in use by another {holder.get('what') or what} ({who_text}); two runs "
            "in one folder would pay for the same work twice and corrupt its record, so this one stops here, "
            f"before any LM call, leaving that folder as it is. Wait for that run to end (then rerun to resume "
            f"it), or use another {option}.")
        err.holder = holder
        return err

    @property
    def held(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        """Give the folder up (idempotent); the lock file stays, emptied."""
        f, self._file = self._file, None
        if f is None:
            return
        try:
            f.seek(0)
            f.truncate()
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        except OSError:
            pass
        finally:
            f.close()

    def __enter__(self) -> "DirLock":
        return self

    def __exit__(self, *_: Any) -> None:
        self.release()


@dataclass(frozen=True)
class LoggedCall:
    """One scored call of the eval log."""

    tag: int            # the work unit (iteration, turn) that made it
    key: str            # the candidate's content hash
    kind: str           # its budget kind
    result: RowResult

    def to_json(self) -> str:
        return json.dumps({"iter": self.tag, "hash": self.key, "kind": self.kind, "result": self.result.to_dict()})

    @classmethod
    def from_json(cls, line: str) -> "LoggedCall":
        rec = json.loads(line)
        if rec.get("kind") not in BUDGET_KINDS:
            raise ValueError(f"unknown budget kind {rec.get('kind')!r}")
        return cls(int(rec["iter"]), str(rec["hash"]), rec["kind"], RowResult.from_dict(rec["result"]))


@dataclass(frozen=True)
class Resume:
    """What `open` found: the committed state (None: nothing committed yet), the calls of committed work (in
    log order), and the pending calls (made by work the interruption cut off)."""

    state: dict[str, Any] | None
    committed: tuple[LoggedCall, ...] = ()
    pending: tuple[LoggedCall, ...] = ()
    routes: tuple[tuple[MemoKey, Decision], ...] = ()    # router decisions the run learnt (the memo's start)

    @property
    def resumed(self) -> bool:
        return self.state is not None or bool(self.pending)


class Replay:
    """Pending calls of a resumed run, by (unit, candidate, row): `take` one when the run asks for exactly
    that call again; `expire` what no unit asked for once the units up to a tag are done (lost calls)."""

    def __init__(self, pending: Iterable[LoggedCall] = ()):
        self._calls: dict[tuple[int, str, str], deque[LoggedCall]] = {}
        for call in pending:
            self._calls.setdefault((call.tag, call.key, call.result.row_id), deque()).append(call)
        self._lock = threading.Lock()

    def take(self, tag: int, key: str, row_id: str) -> RowResult | None:
        with self._lock:
            calls = self._calls.get((tag, key, row_id))
            if not calls:
                return None
            call = calls.popleft()
            if not calls:
                del self._calls[(tag, key, row_id)]
            return call.result

    def expire(self, upto: int | None = None) -> int:
        """Drop the calls of units <= `upto` (None: all) that were not taken; their number (lost calls)."""
        with self._lock:
            gone = [k for k in self._calls if upto is None or k[0] <= upto]
            return sum(len(self._calls.pop(k)) for k in gone)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._calls.values())


def _differences(before: Any, now: Any, path: str = "") -> list[str]:
    """What differs between two identities, one line per leaf: `merge.enabled: was true, now false`."""
    if isinstance(before, Mapping) and isinstance(now, Mapping):
        out: list[str] = []
        for key in sorted(set(before) | set(now)):
            out += _differences(before.get(key), now.get(key), f"{path}.{key}" if path else str(key))
        return out
    if before == now:
        return []
    was, is_ = (json.dumps(v, sort_keys=True, default=str) for v in (before, now))
    return [f"{path}: was {was[:200]}, now {is_[:200]}"]


class CheckpointStore:
    """The run's files in `log_dir` (see the module docstring). `identity` is a JSON-able mapping of what makes
    the run, by name; `what` names the run in messages ("search", "OEO run")."""

    def __init__(self, log_dir: str | Path, identity: Mapping[str, Any], *, what: str = "run"):
        self.dir = Path(log_dir)
        self.identity = json.loads(json.dumps(dict(identity), sort_keys=True, default=str))
        self.what = what
        self._lock = threading.Lock()
        self._logs: dict[str, Any] = {}   # the append-only logs open for appending, by file name
        self._claim: DirLock | None = None

    # -- opening: the only resume ------------------------------------------------------------------------
    def open(self) -> Resume:
        """Make log_dir ready and take it for this run (`DirLock`: a run alive in it refuses this one with
        `LogDirInUseError`); refuse another run's files; return what an interrupted run left (see Resume). The
        folder stays this run's until `release`."""
        self._prepare()
        try:
            return self._open()
        except BaseException:
            self.release()
            raise

    def _open(self) -> Resume:
        marker = self._read_json(IDENTITY)
        state = self._read_json(STATE)
        if marker is None and state is None:
            self._check_no_stray_log()
            atomic_write_text(self.dir / EVALS, "")
            atomic_write_text(self.dir / ROUTES, "")
            atomic_write_text(self.dir / IDENTITY, json.dumps({"version": STATE_VERSION, "identity": self.identity}))
            return Resume(None)
        self._check_identity(marker, state)
        calls = self._read_log(EVALS, LoggedCall.from_json, LoggedCall.to_json)
        committed_tags = set(state.get("committed", ())) if state is not None else set()
        committed = tuple(c for c in calls if c.tag in committed_tags)
        pending = tuple(c for c in calls if c.tag not in committed_tags)
        routes = self._read_log(ROUTES, _route_from_json, lambda r: _route_line(*r))
        return Resume(state, committed, pending, tuple(routes))

    def _prepare(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._claim = DirLock.acquire(self.dir, what=self.what)   # before anything is read or written
            probe = self.dir / ".write_test"
            probe.write_text("ok")
            probe.unlink()
        except OSError as e:
            self.release()
            raise PermissionError(f"log_dir {str(self.dir)!r} is not writable ({e}); pass a directory you can "
                                  "write to, or log_dir=None to run without a record") from e

    def _read_json(self, name: str) -> dict[str, Any] | None:
        path = self.dir / name
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:  # cannot happen with atomic writes; say so if it does
            raise RuntimeError(f"{path} is corrupt ({e}); restore it from a backup or start a new log_dir") from e
        version = data.get("version") if isinstance(data, dict) else None
        if version != STATE_VERSION:
            raise ResumeMismatchError(
                f"{path} has layout version {version!r}, but this dspy_adaptive reads version {STATE_VERSION}: it "
                "was written by another release. Resume it with that release, or use a new log_dir (or delete "
                f"{str(self.dir)!r}) to start over.")
        return data

    def _check_no_stray_log(self) -> None:
        path = self.dir / EVALS
        if path.exists() and path.stat().st_size:
            raise ResumeMismatchError(
                f"log_dir {str(self.dir)!r} holds scored calls ({EVALS}) but no record of which run made them: "
                f"refusing to mix them into this {self.what}. Use a new log_dir, or delete that one to start over.")

    def _check_identity(self, marker: dict[str, Any] | None, state: dict[str, Any] | None) -> None:
        before = (state or {}).get("identity") or (marker or {}).get("identity") or {}
        if before != self.identity:
            diffs = _differences(before, self.identity)
            raise ResumeMismatchError.listing(
                diffs,
                f"log_dir {str(self.dir)!r} holds another {self.what} (a different configuration, program or data, "
                "or other LMs); refusing to resume it silently. What differs:\n  " + "\n  ".join(diffs[:12])
                + ("\n  ..." if len(diffs) > 12 else "") + "\nRerun with the same settings to resume it; to start "
                "fresh, use a new log_dir, or delete the old one to start over.")

    def _read_log(self, name: str, parse: Callable[[str], Any], dump: Callable[[Any], str]) -> list[Any]:
        """The records of an append-only log, read up to a torn tail (a crash mid-append: nothing after it was
        flushed), which the log is rewritten without. A missing log (a log_dir of an earlier release has no
        route log) has none."""
        records: list[Any] = []
        path = self.dir / name
        if not path.exists():
            return records
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    records.append(parse(line))
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    break
        atomic_write_text(path, "".join(dump(r) + "\n" for r in records))
        return records

    def discard_unused(self) -> bool:
        """The run stopped before it logged or committed anything (an LM that cannot be used): remove the identity
        and the empty log `open` wrote, so a corrected rerun starts fresh instead of being refused as another run.
        True when they were removed."""
        self.close()
        evals = self.dir / EVALS
        if (self.dir / STATE).exists() or (evals.exists() and evals.stat().st_size):
            return False
        for name in (IDENTITY, EVALS, ROUTES):
            (self.dir / name).unlink(missing_ok=True)
        return True

    # -- running --------------------------------------------------------------------------------------------
    def append_eval(self, tag: int, key: str, kind: str, result: RowResult) -> None:
        self._append(EVALS, LoggedCall(tag, key, kind, result).to_json())

    def append_route(self, key: MemoKey, decision: Decision) -> None:
        """A router decision the memo learnt (`RouteMemo`'s journal)."""
        self._append(ROUTES, _route_line(key, decision))

    def _append(self, name: str, line: str) -> None:
        with self._lock:
            f = self._logs.get(name)
            if f is None:
                f = self._logs[name] = open(self.dir / name, "a", encoding="utf-8")
            f.write(line + "\n")
            f.flush()  # a SIGKILL must not drop what was paid for

    def commit(self, state: Mapping[str, Any]) -> None:
        """Replace state.json by `state` (which names its committed work units in `committed`)."""
        with self._lock:
            evals = self._logs.get(EVALS)
            if evals is not None:
                evals.flush()
                os.fsync(evals.fileno())
        payload = {**state, "version": STATE_VERSION, "identity": self.identity}
        atomic_write_text(self.dir / STATE, json.dumps(payload))

    def close(self) -> None:
        """Close the eval log; the folder stays this run's (its record is still to be written) until `release`."""
        with self._lock:
            for f in self._logs.values():
                f.close()
            self._logs.clear()

    def release(self) -> None:
        """The run is over (ended, failed or interrupted) and its record written: close, and give log_dir up."""
        self.close()
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.release()


def _route_line(key: MemoKey, decision: Decision) -> str:
    slot, answer = decision
    return json.dumps({"key": list(key), "slot": slot, "answer": answer})


def _route_from_json(line: str) -> tuple[MemoKey, Decision]:
    rec = json.loads(line)
    r, s, request = (str(x) for x in rec["key"])
    slot, answer = rec["slot"], rec["answer"]
    if not (slot is None or (isinstance(slot, int) and not isinstance(slot, bool))):
        raise ValueError(f"slot {slot!r} is not a slot number")
    return (r, s, request), (slot, None if answer is None else str(answer))
