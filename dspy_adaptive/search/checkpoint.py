"""Checkpoint and resume -- the one resume of both optimizers: nothing committed is lost, no scored call is
forgotten, none is charged twice.

Files in log_dir:

* `identity.json`: what makes the run (program, data, settings, LMs, ...), written before its first scored
  call. A rerun with anything different is refused, naming what differs (`ResumeMismatchError`).
* `state.json`: the committed state (the optimizer's own dict, with `committed`: the work units -- iterations,
  turns -- folded into it). Replaced atomically (temp file, fsync, rename).
* `evals.jsonl`: an append-only log of every scored call as it completes, tagged with its work unit, the
  candidate's content hash and its budget kind; flushed at once, so a kill hides nothing.

On resume (`CheckpointStore.open`) the log splits in two: calls of committed units (already in the state's
budget) and *pending* calls, made by units the interruption cut off. Pending calls were paid for: they are
charged again to the budget at once (so a resumed run never exceeds its budget), and kept as a `Replay`: when
the resumed run scores the same candidate on the same row for the same unit -- the cut-off unit redone, as
a seeded run redoes it -- the logged result is used instead of running the row again. A pending call no
redone unit asks for is counted as lost (`Replay.expire`): charged, its result unused.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from dspy_adaptive.data import InputError
from dspy_adaptive.schema import BUDGET_KINDS, RowResult

STATE = "state.json"
EVALS = "evals.jsonl"
IDENTITY = "identity.json"
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
        self._evals = None

    # -- opening: the only resume ------------------------------------------------------------------------
    def open(self) -> Resume:
        """Make log_dir ready; refuse another run's files; return what an interrupted run left (see Resume)."""
        self._prepare()
        marker = self._read_json(IDENTITY)
        state = self._read_json(STATE)
        if marker is None and state is None:
            self._check_no_stray_log()
            atomic_write_text(self.dir / EVALS, "")
            atomic_write_text(self.dir / IDENTITY, json.dumps({"version": STATE_VERSION, "identity": self.identity}))
            return Resume(None)
        self._check_identity(marker, state)
        calls = self._read_log()
        committed_tags = set(state.get("committed", ())) if state is not None else set()
        committed = tuple(c for c in calls if c.tag in committed_tags)
        pending = tuple(c for c in calls if c.tag not in committed_tags)
        atomic_write_text(self.dir / EVALS, "".join(c.to_json() + "\n" for c in calls))   # drops a torn tail
        return Resume(state, committed, pending)

    def _prepare(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            probe = self.dir / ".write_test"
            probe.write_text("ok")
            probe.unlink()
        except OSError as e:
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

    def _read_log(self) -> list[LoggedCall]:
        calls: list[LoggedCall] = []
        path = self.dir / EVALS
        if not path.exists():
            return calls
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    calls.append(LoggedCall.from_json(line))
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    break  # torn tail from a crash mid-append (nothing after it was flushed)
        return calls

    def discard_unused(self) -> bool:
        """The run stopped before it logged or committed anything (an LM that cannot be used): remove the identity
        and the empty log `open` wrote, so a corrected rerun starts fresh instead of being refused as another run.
        True when they were removed."""
        self.close()
        evals = self.dir / EVALS
        if (self.dir / STATE).exists() or (evals.exists() and evals.stat().st_size):
            return False
        for name in (IDENTITY, EVALS):
            (self.dir / name).unlink(missing_ok=True)
        return True

    # -- running --------------------------------------------------------------------------------------------
    def append_eval(self, tag: int, key: str, kind: str, result: RowResult) -> None:
        line = LoggedCall(tag, key, kind, result).to_json()
        with self._lock:
            if self._evals is None:
                self._evals = open(self.dir / EVALS, "a", encoding="utf-8")
            self._evals.write(line + "\n")
            self._evals.flush()  # a SIGKILL must not drop counted calls

    def commit(self, state: Mapping[str, Any]) -> None:
        """Replace state.json by `state` (which names its committed work units in `committed`)."""
        with self._lock:
            if self._evals is not None:
                self._evals.flush()
                os.fsync(self._evals.fileno())
        payload = {**state, "version": STATE_VERSION, "identity": self.identity}
        atomic_write_text(self.dir / STATE, json.dumps(payload))

    def close(self) -> None:
        with self._lock:
            if self._evals is not None:
                self._evals.close()
                self._evals = None
