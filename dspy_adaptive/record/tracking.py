"""Experiment tracking, as dspy.GEPA users know it: MLflow (`use_mlflow=True`) and Weights & Biases
(`use_wandb=True`). Both are optional extras (`pip install "dspy-adaptive[mlflow]"`, or wandb yourself).

What a search logs:

* its configuration, once, as run parameters (W&B: the run config);
* one step per proposal, with step = the scored calls spent when it was recorded: the best validation
  mean so far, the proposal's candidate validation mean when it entered the archive, its minibatch sums,
  whether it was accepted, the archive size, and per role (router, specialist, fallback, reflection,
  metric) the LM calls, tokens and USD spent so far, plus the proposal's own USD;
* at the end, the run directory (run.json, report.md, the PNGs, the exported best library) as artifacts.

MLflow: logs into the active run when there is one (attaches, and leaves it open); otherwise starts a run
(in `mlflow_experiment_name`, against `mlflow_tracking_uri` when given, through a client of its own: no
global MLflow setting changes) and ends it. Every write names its run id, so the logging thread does not
matter. W&B: attaches to `wandb.run` when `wandb_attach_existing`
(gepa_kwargs) and a run is active, else `wandb.init(**wandb_init_kwargs)`.

Separately, every full validation is a `dspy.Evaluate` run for DSPy's callbacks (search/evaluate.py), so
`mlflow.dspy.autolog()` records them as it does dspy.GEPA's.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from dspy_adaptive.data import InputError
from dspy_adaptive.schema import ProposalRecord

if TYPE_CHECKING:  # pragma: no cover
    from dspy_adaptive.search.engine import SearchEngine


@dataclass
class TrackingSettings:
    use_mlflow: bool = False
    mlflow_tracking_uri: str | None = None
    mlflow_experiment_name: str | None = None
    mlflow_attach_existing: bool = False
    use_wandb: bool = False
    wandb_api_key: str | None = None
    wandb_init_kwargs: dict[str, Any] | None = None
    wandb_attach_existing: bool = False
    key_prefix: str = ""

    def check_installed(self) -> None:
        """Raise InputError now (before any LM call) when a requested tracker's package is missing."""
        for on, module, extra in ((self.use_mlflow, "mlflow", 'pip install "dspy-adaptive[mlflow]"'),
                                  (self.use_wandb, "wandb", "pip install wandb")):
            if not on:
                continue
            try:
                __import__(module)
            except ImportError as e:
                raise InputError(f"use_{module}=True needs the {module} package, which is not installed "
                                 f"({e}); install it with: {extra}") from e


class Tracker:
    """One experiment-tracking backend. Subclasses implement the four writes."""

    def start(self, config: Mapping[str, Any]) -> None: ...

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_artifacts(self, directory: Path) -> None: ...

    def finish(self, failed: bool = False) -> None: ...


class MlflowTracker(Tracker):
    """MLflow through its client API with explicit run ids; no global MLflow setting is changed."""

    def __init__(self, s: TrackingSettings):
        import mlflow

        self.mlflow, self.s = mlflow, s
        client = mlflow.MlflowClient
        self.client = client(tracking_uri=s.mlflow_tracking_uri) if s.mlflow_tracking_uri else client()
        self.run_id: str | None = None
        self.owns_run = False
        self.fluent = False

    def start(self, config: Mapping[str, Any]) -> None:
        active = self.mlflow.active_run()
        if active is not None and not self.s.mlflow_tracking_uri:
            self.run_id = active.info.run_id       # attach: log into the caller's run, leave it open
        elif self.s.mlflow_tracking_uri or self.s.mlflow_experiment_name:
            name = self.s.mlflow_experiment_name
            exp = self.client.get_experiment_by_name(name) if name else None
            exp_id = exp.experiment_id if exp is not None else (self.client.create_experiment(name) if name else "0")
            self.run_id, self.owns_run = self.client.create_run(exp_id, run_name="adaptive-gepa").info.run_id, True
        else:   # the caller's MLflow defaults; an active run for the search, so autolog's eval runs nest in it
            self.run_id, self.owns_run = self.mlflow.start_run(run_name="adaptive-gepa").info.run_id, True
            self.fluent = True
        params = {f"{self.s.key_prefix}{k}": _param_text(v) for k, v in config.items()}
        for k, v in params.items():   # one by one: a key the caller's run already holds keeps its value
            try:
                self.client.log_param(self.run_id, k, v)
            except Exception:  # noqa: BLE001 - MLflow refuses to change a logged param; keep going
                pass

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        Metric = self.mlflow.entities.Metric  # noqa: N806 - MLflow's class

        now = int(time.time() * 1000)
        batch = [Metric(f"{self.s.key_prefix}{k}", float(v), now, int(step)) for k, v in metrics.items()
                 if _finite(v)]
        if batch:
            self.client.log_batch(self.run_id, metrics=batch)

    def log_artifacts(self, directory: Path) -> None:
        self.client.log_artifacts(self.run_id, str(directory), artifact_path="adaptive_gepa")

    def finish(self, failed: bool = False) -> None:
        if self.owns_run and self.run_id is not None:
            status = "FAILED" if failed else "FINISHED"
            active = self.mlflow.active_run()
            if self.fluent and active is not None and active.info.run_id == self.run_id:
                self.mlflow.end_run(status=status)
            else:
                self.client.set_terminated(self.run_id, status=status)


class WandbTracker(Tracker):
    def __init__(self, s: TrackingSettings):
        import wandb

        self.wandb, self.s = wandb, s
        self.run = None
        self.owns_run = False

    def start(self, config: Mapping[str, Any]) -> None:
        if self.s.wandb_api_key:
            self.wandb.login(key=self.s.wandb_api_key, verify=False)
        if self.s.wandb_attach_existing and getattr(self.wandb, "run", None) is not None:
            self.run = self.wandb.run
        else:
            self.run = self.wandb.init(**(self.s.wandb_init_kwargs or {}))
            self.owns_run = True
        self.run.config.update({f"{self.s.key_prefix}{k}": _param_text(v) for k, v in config.items()},
                               allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log({f"{self.s.key_prefix}{k}": float(v) for k, v in metrics.items() if _finite(v)}, step=int(step))

    def log_artifacts(self, directory: Path) -> None:
        artifact = self.wandb.Artifact("adaptive-gepa-run", type="adaptive-gepa-run")
        artifact.add_dir(str(directory))
        self.run.log_artifact(artifact)

    def finish(self, failed: bool = False) -> None:
        if self.owns_run and self.run is not None:
            self.run.finish(exit_code=1 if failed else 0)


class SearchTracker:
    """Feeds every configured backend from the search: `start`, `on_proposal` (an engine observer),
    `finish`. A backend that fails while logging is dropped with a warning: tracking never stops a search."""

    def __init__(self, settings: TrackingSettings):
        self.backends: list[Tracker] = []
        if settings.use_mlflow:
            self.backends.append(MlflowTracker(settings))
        if settings.use_wandb:
            self.backends.append(WandbTracker(settings))
        self._last_step = -1

    def __bool__(self) -> bool:
        return bool(self.backends)

    def _each(self, what: str, *args: Any, **kwargs: Any) -> None:
        import warnings

        for backend in list(self.backends):
            try:
                getattr(backend, what)(*args, **kwargs)
            except Exception as e:  # noqa: BLE001
                warnings.warn(f"{type(backend).__name__}.{what} failed ({type(e).__name__}: {e}); "
                              "that tracker is switched off for the rest of this run", stacklevel=2)
                self.backends.remove(backend)

    def start(self, config: Mapping[str, Any]) -> None:
        self._each("start", config)

    def on_proposal(self, engine: "SearchEngine", record: ProposalRecord) -> None:
        self._each("log_metrics", proposal_metrics(engine, record), record.budget_at)

    def log_artifacts(self, directory: Path) -> None:
        self._each("log_artifacts", directory)

    def finish(self, failed: bool = False) -> None:
        self._each("finish", failed)


def optimizer_config(params: Mapping[str, Any], optimizer: str, **resolved: Any) -> dict[str, Any]:
    """An optimizer's configuration as trackers log it: its parameters (secrets and objects left out, gepa_kwargs
    by key) and the values resolved when the run started (`resolved_<name>`)."""
    config = {k: v for k, v in params.items() if k not in ("tracking", "gepa_kwargs", "wandb_api_key")}
    config.update({f"resolved_{k}" if k in ("max_metric_calls", "num_threads", "seed") else k: v
                   for k, v in resolved.items()}, optimizer=optimizer)
    if params.get("gepa_kwargs"):
        config["gepa_kwargs"] = sorted(params["gepa_kwargs"])
    return config


def log_run_artifacts(tracker: SearchTracker, log_dir: str | None, write: Callable[[Path], None]) -> None:
    """The run directory as artifacts: `log_dir` itself, or (no log_dir) the files `write(directory)` writes to a
    temporary directory."""
    if log_dir:
        tracker.log_artifacts(Path(log_dir))
        return
    import tempfile
    with tempfile.TemporaryDirectory(prefix="adaptive-gepa-run-") as tmp:
        write(Path(tmp))
        tracker.log_artifacts(Path(tmp))


def proposal_metrics(engine: "SearchEngine", record: ProposalRecord) -> dict[str, float]:
    """The numbers of one proposal's tracking step."""
    best = engine.archive[engine.archive.best_index()]
    m: dict[str, float] = {
        "best_val_score": best.val_mean, "archive_size": len(engine.archive),
        "accepted": float(record.accepted), "scored_calls": record.budget_at, "iteration": record.iteration,
        "proposal/cost_usd": record.cost,
    }
    if record.child_index is not None:
        m["candidate_val_score"] = engine.archive[record.child_index].val_mean
    if record.parent_sum is not None:
        m["parent_minibatch_score"] = record.parent_sum
    if record.child_sum is not None:
        m["child_minibatch_score"] = record.child_sum
    for role_name, v in engine.meter.snapshot().items():
        m[f"{role_name}/calls"] = v["calls"]
        m[f"{role_name}/prompt_tokens"] = v["prompt_tokens"]
        m[f"{role_name}/completion_tokens"] = v["completion_tokens"]
        m[f"{role_name}/cost_usd"] = v["cost"]
    totals = engine.meter.totals()
    m["total/cost_usd"] = totals["cost"]
    m["total/tokens"] = totals["prompt_tokens"] + totals["completion_tokens"]
    return m


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _param_text(value: Any, limit: int = 500) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["MlflowTracker", "SearchTracker", "Tracker", "TrackingSettings", "WandbTracker", "log_run_artifacts",
           "optimizer_config",
           "proposal_metrics"]
