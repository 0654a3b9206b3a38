"""A hand-built `AdaptiveGEPAResult` for the analysis/plot/notebook tests (no LM, no search).

Archive (8 validation rows: a0..a3 family "arith", c0..c3 family "caps"):
  #0 seed                      mean 0.500  everything on the fallback
  #1 activate slot 1 (<- #0)   mean 0.750  arith rows on slot 1
  #2 activate slot 2 (<- #0)   mean 0.625  caps rows on slot 2
  #3 merge (<- #1, #2)  BEST   mean 0.875  a0-a2 -> slot 1, a3 -> slot 2, c0-c2 -> slot 2, c3 -> fallback
  #4 rewrite_program (<- #1)   mean 0.500  not an ancestor of the best
"""

from __future__ import annotations

from pathlib import Path

from dspy_adaptive.program.library import Library, Slot
from dspy_adaptive.record.analysis import write_labels
from dspy_adaptive.record.run_record import AdaptiveGEPAResult, action_counts, write_run_record

ROWS = ["a0", "a1", "a2", "a3", "c0", "c1", "c2", "c3"]
LABELS = {r: ("arith" if r.startswith("a") else "caps") for r in ROWS}

ADD_SRC = "class Adder(dspy.Module):\n    def forward(self, question):\n        return dspy.Prediction(answer='5')\n"
CAPS_SRC = ("class Caps(dspy.Module):\n    def forward(self, question):\n"
            "        return dspy.Prediction(answer=question.upper())\n")


def _lib(*slots: tuple[int, str, str, str], router: str | None = None) -> Library:
    lib = Library.empty(3) if router is None else Library.empty(3, router=router)
    for k, desc, src, profile in slots:
        lib = lib.with_slot(k, Slot().activated(desc, src, profile))
    return lib


def _scores(values: str) -> dict[str, float]:
    return {r: float(v) for r, v in zip(ROWS, values)}


def _routes(slots: list[int | None]) -> dict[str, int | None]:
    return dict(zip(ROWS, slots))


def make_result(log_dir: str | None = None) -> AdaptiveGEPAResult:
    arith = (1, "Arithmetic: requests that add numbers ('add:').", ADD_SRC, "fast")
    caps = (2, "Upper-casing: requests that start with 'upper:'.", CAPS_SRC, "deep")
    candidates = [_lib(), _lib(arith), _lib(caps), _lib(arith, caps),
                  _lib((1, arith[1], ADD_SRC + "# v2\n", "fast"))]
    subscores = [_scores("00001111"), _scores("11001111"), _scores("00011111"), _scores("11101111"),
                 _scores("10001101")]
    executed = [_routes([0] * 8), _routes([1, 1, 1, 1, 0, 0, 0, 0]), _routes([0, 0, 0, 0, 2, 2, 2, 2]),
                _routes([1, 1, 1, 2, 2, 2, 2, 0]), _routes([1, 1, 1, 1, 0, 0, 0, None])]
    selected = [dict(e) for e in executed]
    selected[3]["c3"] = 2  # the router picked slot 2, which failed over to the fallback
    means = [sum(s.values()) / len(s) for s in subscores]
    proposals = [
        dict(iteration=1, kind="reflect", parents=[0], action="activate", slot=1, minibatch=["a0", "c0"],
             parent_sum=1.0, child_sum=2.0, accepted=True, reason=None, child_index=1, child_hash=None,
             budget_at=20, details={}),
        dict(iteration=2, kind="reflect", parents=[0], action="activate", slot=2, minibatch=["a3", "c1"],
             parent_sum=1.0, child_sum=1.5, accepted=True, reason=None, child_index=2, child_hash=None,
             budget_at=40, details={}),
        dict(iteration=3, kind="reflect", parents=[1], action="rewrite_router", slot=None, minibatch=["a1", "c2"],
             parent_sum=2.0, child_sum=1.0, accepted=False, reason="not better on minibatch", child_index=None,
             child_hash=None, budget_at=52, details={}),
        dict(iteration=4, kind="merge", parents=[1, 2], action=None, slot=None, minibatch=["a2", "c3"],
             parent_sum=1.5, child_sum=2.0, accepted=True, reason=None, child_index=3, child_hash=None,
             budget_at=70, details={"alignment": "mutual_best", "slots_from": {"1": 1, "2": 2}}),
        dict(iteration=5, kind="reflect", parents=[1], action="rewrite_program", slot=1, minibatch=["a0", "a1"],
             parent_sum=1.0, child_sum=2.0, accepted=True, reason=None, child_index=4, child_hash=None,
             budget_at=90, details={}),
        dict(iteration=6, kind="skip", parents=[3], action=None, slot=None, minibatch=["a0", "c0"],
             parent_sum=2.0, child_sum=None, accepted=False, reason="perfect minibatch", child_index=None,
             child_hash=None, budget_at=100, details={}),
    ]
    fronts = {}
    for r in ROWS:
        top = max(s[r] for s in subscores)
        fronts[r] = [i for i, s in enumerate(subscores) if s[r] == top]
    return AdaptiveGEPAResult(
        candidates=candidates, parents=[[], [0], [0], [1, 2], [1]],
        origins=["seed", "activate", "activate", "merge", "rewrite_program"],
        val_aggregate_scores=means, val_subscores=subscores, per_val_instance_best_candidates=fronts,
        discovery_eval_counts=[8, 28, 48, 78, 98], executed=executed, selected=selected, proposals=proposals,
        action_counts=action_counts(proposals),
        budget={"max": 120, "spent": 106, "by_kind": {"val": 40, "minibatch": 66}, "overshoot": 0},
        usage={"reflection": {"calls": 5, "prompt_tokens": 9000, "completion_tokens": 1200, "cost": 0.0},
               "task": {"calls": 120, "prompt_tokens": 30000, "completion_tokens": 2400, "cost": 0.0}},
        best_idx=3, seed=0, log_dir=log_dir, merge_events=[proposals[3]["details"]],
    )


def make_run_dir(tmp_path: Path) -> Path:
    """A run directory the notebook can open: run.json/report.md/learning_curve.png + labels.json.

    Swap this for a function that runs a real (scripted-LM) optimizer into `tmp_path` to point the
    notebook test at a genuine run record."""
    run_dir = Path(tmp_path) / "runs" / "synthetic"
    write_run_record(make_result(str(run_dir)), run_dir)
    write_labels(LABELS, run_dir)
    return run_dir


NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "explore_run.ipynb"


def execute_notebook(run_dir: Path, tmp_path: Path, monkeypatch) -> list:
    """Run the notebook top to bottom on `run_dir` (figures to tmp_path/figures); return its code-cell
    outputs, after asserting that no cell errored."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("RUN_DIR", str(run_dir))
    monkeypatch.setenv("PLOTS_DIR", str(Path(tmp_path) / "figures"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=180, resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, errors
    return outputs
