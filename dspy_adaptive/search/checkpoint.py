"""Checkpoint and resume: nothing accepted is lost, no spent call is forgotten.

`state.json` holds the committed search state (archive, budget counts, RNG state, proposal log,
usage). It is replaced atomically (write to a temp file, fsync, rename) after every iteration.
`evals.jsonl` is an append-only log of scored calls tagged with the iteration that made them; on
resume only lines of committed iterations are loaded (a torn last line or the calls of an
uncommitted iteration are dropped, and that iteration is redone exactly as before).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from dspy_adaptive.schema import RowResult

STATE = "state.json"
EVALS = "evals.jsonl"
SEED = "seed.json"      # written before the seed validation: which run the eval log's first rows belong to
#: The layout of state.json this code writes and reads; a state of another version is refused on load.
STATE_VERSION = 1


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


class CheckpointStore:
    def __init__(self, log_dir: str | Path):
        self.dir = Path(log_dir)
        self._lock = threading.Lock()
        self._evals = None

    def prepare(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            probe = self.dir / ".write_test"
            probe.write_text("ok")
            probe.unlink()
        except OSError as e:
            raise PermissionError(f"log_dir {str(self.dir)!r} is not writable ({e}); pass a directory you can "
                                  "write to, or log_dir=None to run without a record") from e

    def has_state(self) -> bool:
        return (self.dir / STATE).exists()

    def load_state(self) -> dict[str, Any]:
        try:
            state = json.loads((self.dir / STATE).read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:  # cannot happen with atomic writes; say so if it does
            raise RuntimeError(f"{self.dir / STATE} is corrupt ({e}); restore it from a backup or start a new "
                               "log_dir") from e
        version = state.get("version") if isinstance(state, dict) else None
        if version != STATE_VERSION:
            raise RuntimeError(f"{self.dir / STATE} has state version {version!r}, but this dspy_adaptive reads "
                               f"version {STATE_VERSION}: it was written by another release. Resume it with that "
                               "release, or start a new log_dir.")
        return state

    def load_evals(self, committed: set[int]) -> tuple[list[tuple[int, str, RowResult]], int]:
        """(every committed scored call as (iteration, candidate hash, result), in log order; the number of
        dropped scored calls) from the eval log. Every line counts: with the paper's accounting the same
        candidate and row may have been scored several times, each a charged call."""
        entries: list[tuple[int, str, RowResult]] = []
        dropped = 0
        path = self.dir / EVALS
        if not path.exists():
            return entries, dropped
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    break  # torn tail from a crash mid-append
                if rec["iter"] in committed:
                    entries.append((rec["iter"], rec["hash"], RowResult.from_dict(rec["result"])))
                else:
                    dropped += 1
        return entries, dropped

    def rewrite_evals(self, entries: list[tuple[int, str, RowResult]]) -> None:
        """Rewrite the eval log to exactly the committed calls (drops uncommitted lines after a resume)."""
        lines = [json.dumps({"iter": it, "hash": h, "result": r.to_dict()}) for it, h, r in entries]
        atomic_write_text(self.dir / EVALS, "".join(line + "\n" for line in lines))

    def start_seed(self, fingerprint: str, seed_hash: str) -> list[RowResult]:
        """Before the seed validation of a run with no state yet: the seed rows an interrupted attempt of the
        same run (same fingerprint) already scored, in log order; the eval log keeps exactly those (anything
        else in it belonged to another run or to nothing committed)."""
        marker = {"fingerprint": fingerprint, "seed_hash": seed_hash}
        same = False
        try:
            same = json.loads((self.dir / SEED).read_text(encoding="utf-8")) == marker
        except (OSError, json.JSONDecodeError):
            pass
        entries = [e for e in self.load_evals({0})[0] if e[1] == seed_hash] if same else []
        latest = {res.row_id: (it, h, res) for it, h, res in entries}
        self.rewrite_evals(list(latest.values()))
        atomic_write_text(self.dir / SEED, json.dumps(marker))
        return [res for _, _, res in latest.values()]

    def append_eval(self, iteration: int, candidate_hash: str, result: RowResult) -> None:
        line = json.dumps({"iter": iteration, "hash": candidate_hash, "result": result.to_dict()})
        with self._lock:
            if self._evals is None:
                self._evals = open(self.dir / EVALS, "a", encoding="utf-8")
            self._evals.write(line + "\n")
            self._evals.flush()  # a SIGKILL must not drop counted calls

    def commit(self, state: dict[str, Any]) -> None:
        with self._lock:
            if self._evals is not None:
                self._evals.flush()
                os.fsync(self._evals.fileno())
        atomic_write_text(self.dir / STATE, json.dumps(state))

    def close(self) -> None:
        with self._lock:
            if self._evals is not None:
                self._evals.close()
                self._evals = None
