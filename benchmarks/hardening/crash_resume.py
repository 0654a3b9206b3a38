"""Family 3: kill -9 a scripted search at deterministic points, resume it, compare with an uninterrupted run.

The child (crash_child.py) logs every LM call, metric call, evaluation batch and state.json write to a
calls file. Kill points are chosen from the UNINTERRUPTED reference run's log, so they are exact:

  mid-evaluation   the actor call after the 2nd scored row of a batch (a child_minibatch batch in the toy
                   scenario, the merge_check batch in the merge scenario): scored calls were made that
                   the batch had not yet reported
  mid-reflection   the edit call (second reflection call) of the first proposal, whose iteration already
                   paid for a fresh parent minibatch
  mid-checkpoint   the middle state.json write: temp file written and fsynced, SIGKILL before os.replace
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHILD = Path(__file__).with_name("crash_child.py")
REPO = Path(__file__).resolve().parents[2]


def run_child(log_dir: Path, scenario: str, kill: str, calls: Path, timeout: float = 120) -> int:
    calls.parent.mkdir(parents=True, exist_ok=True)
    cfg = {"log_dir": str(log_dir), "scenario": scenario, "kill": kill, "calls": str(calls)}
    env = dict(os.environ, PYTHONPATH=str(REPO), LITELLM_LOCAL_MODEL_COST_MAP="True")
    proc = subprocess.run([sys.executable, str(CHILD), json.dumps(cfg)], cwd=str(REPO), env=env,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode not in (0, -9):
        raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.returncode


def read_calls(path: Path) -> list[tuple[str, str]]:
    return [tuple(line.split("\t", 1)) for line in path.read_text().splitlines() if line]


def kill_point(ref_calls: list[tuple[str, str]], point: str, scenario: str) -> str:
    """The kill spec ("role:N") for a point, from the reference run's call log."""
    if point == "mid-checkpoint":
        n = sum(1 for r, _ in ref_calls if r == "checkpoint")
        return f"checkpoint:{max(2, n // 2)}"
    if point == "mid-reflection":
        k = 0
        for role_name, detail in ref_calls:
            if role_name == "reflection":
                k += 1
                if detail != "action,slot":     # the edit call of the first proposal
                    return f"reflection:{k}"
        raise AssertionError("no reflection edit call in the reference run")
    want = "merge_check" if scenario == "merge" else "child_minibatch"
    markers = [i for i, (r, d) in enumerate(ref_calls) if r == "evaluate" and d == want]
    assert markers, f"no {want} batch in the reference run"
    start = markers[len(markers) // 2]
    actors = metrics = 0
    for i, (role_name, _) in enumerate(ref_calls):
        if role_name == "actor":
            actors += 1
            if i > start and metrics >= 2:
                return f"actor:{actors}"
        elif role_name == "metric" and i > start:
            metrics += 1
    raise AssertionError("batch too short to kill mid-way")


def archive_view(run: dict) -> dict[str, Any]:
    return {"hashes": [c["content_hash"] if "content_hash" in c else json.dumps(c, sort_keys=True)
                       for c in run["candidates"]],
            "scores": run["val_subscores"], "parents": run["parents"], "origins": run["origins"],
            "budget_by_kind": run["budget"]["by_kind"], "spent": run["budget"]["spent"],
            "proposals": [(p["kind"], p["action"], p["accepted"], p["minibatch"], p["child_hash"])
                          for p in run["proposals"]]}


@dataclass
class CrashOutcome:
    scenario: str
    point: str
    kill: str
    killed: bool
    state_parseable: bool                 # state.json parsed after the kill (and after the resume)
    accepted_before: int                  # candidates in the killed run's last committed state
    lost_accepted: list[str]              # of those, missing from the final archive (must be empty)
    real_calls: int                       # metric calls really made, both processes
    spent: int
    lost_to_interruptions: int
    undercount: int                       # real_calls - (spent + lost), must be <= 0
    equal_to_reference: bool
    diff: list[str] = field(default_factory=list)


def library_hashes(state_or_run: dict) -> list[str]:
    from dspy_adaptive.program.library import Library
    out = []
    for c in state_or_run.get("archive", state_or_run.get("candidates", [])):
        lib = c["library"] if "library" in c else c
        out.append(Library.from_dict(lib).content_hash)
    return out


def reference(tmp: Path, scenario: str) -> tuple[dict, list[tuple[str, str]]]:
    d = tmp / f"ref-{scenario}"
    calls = tmp / f"ref-{scenario}.calls"
    assert run_child(d, scenario, "none", calls) == 0
    return json.loads((d / "run.json").read_text()), read_calls(calls)


def crash_and_resume(tmp: Path, scenario: str, point: str, ref: tuple[dict, list]) -> CrashOutcome:
    ref_run, ref_calls = ref
    kill = kill_point(ref_calls, point, scenario)
    d = tmp / f"{scenario}-{point}"
    calls = tmp / f"{scenario}-{point}.calls"
    rc = run_child(d, scenario, kill, calls)
    parseable, accepted = True, []
    try:
        state = json.loads((d / "state.json").read_text())
        accepted = library_hashes(state)
    except (OSError, json.JSONDecodeError):
        parseable = False
    rc2 = run_child(d, scenario, "none", calls)
    final = json.loads((d / "run.json").read_text())
    try:
        json.loads((d / "state.json").read_text())
    except (OSError, json.JSONDecodeError):
        parseable = False
    final_hashes = library_hashes(final)
    real = sum(1 for r, _ in read_calls(calls) if r == "metric")
    spent, lost = final["budget"]["spent"], final["budget"]["lost_to_interruptions"]
    a, b = archive_view(final), archive_view(ref_run)
    diff = [k for k in a if a[k] != b[k]]
    if final_hashes != library_hashes(ref_run):
        diff.append("candidate hashes")
    return CrashOutcome(scenario=scenario, point=point, kill=kill, killed=rc == -9 and rc2 == 0,
                        state_parseable=parseable, accepted_before=len(accepted),
                        lost_accepted=[h for h in accepted if h not in final_hashes], real_calls=real, spent=spent,
                        lost_to_interruptions=lost, undercount=real - (spent + lost), equal_to_reference=not diff,
                        diff=diff)


POINTS = [("toy", "mid-evaluation"), ("toy", "mid-reflection"), ("toy", "mid-checkpoint"),
          ("merge", "mid-evaluation")]
