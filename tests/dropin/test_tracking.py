"""Experiment tracking and the cost ledger: DSPy callbacks see full validations as evaluation runs (minibatches
disable_logging); use_mlflow logs params, one step per proposal and the run's artifacts (offline, a local file
store); use_wandb the same through wandb's API; tokens and USD per role and per proposal; max_cost_usd stops."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import dspy
import pytest
from dspy.utils.callback import BaseCallback

from dspy_adaptive.lm.usage import UsageMeter, price, role
from dspy_adaptive.testing import scripted_lm
from tests.core import toy
from tests.dropin.common import data, optimizer


@pytest.fixture(autouse=True)
def actor(monkeypatch):
    # MLflow 3 keeps its local file store behind this switch (its sqlite store needs the full mlflow package)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    with dspy.context(lm=toy.actor_lm()):
        yield


class Recorder(BaseCallback):
    def __init__(self):
        self.starts, self.ends = [], []

    def on_evaluate_start(self, call_id, instance, inputs):
        self.starts.append((inputs.get("callback_metadata"), inputs.get("program")))

    def on_evaluate_end(self, call_id, outputs, exception=None):
        self.ends.append(outputs)


def test_dspy_callbacks_see_full_validations_and_minibatches_disable_logging():
    rec = Recorder()
    train, val = data()
    with dspy.context(callbacks=[rec]):
        res = optimizer().compile(dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
    metas = [m for m, _ in rec.starts]
    full = [m for m in metas if m == {"metric_key": "eval_full"}]
    assert len(full) == len(res.candidates)                   # seed + every archived child's validation
    assert all(m in ({"metric_key": "eval_full"}, {"disable_logging": True}) for m in metas)
    assert {"disable_logging": True} in metas
    scores = sorted(r.score for r, m in zip(rec.ends, metas) if m == {"metric_key": "eval_full"})
    assert scores == sorted(100 * s for s in res.val_aggregate_scores)
    assert all(len(r.results) == len(val) for r, m in zip(rec.ends, metas) if m == {"metric_key": "eval_full"})


def test_mlflow_run_with_params_metrics_and_artifacts(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    uri = (tmp_path / "mlruns").as_uri()
    train, val = data()
    opt = optimizer(use_mlflow=True, log_dir=str(tmp_path / "run"),
                    gepa_kwargs={"mlflow_tracking_uri": uri, "mlflow_experiment_name": "adaptive-test"})
    res = opt.compile(dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("adaptive-test")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["reflection_minibatch_size"] == "4" and params["resolved_max_metric_calls"] == "60"
    assert params["optimizer"] == "AdaptiveGEPA"
    best = client.get_metric_history(run.info.run_id, "best_val_score")
    assert len(best) == len(res.proposals)                             # one step per proposal
    assert [m.step for m in best] == [p["budget_at"] for p in res.proposals]   # step = scored calls spent
    assert best[-1].value == max(res.val_aggregate_scores)
    assert client.get_metric_history(run.info.run_id, "candidate_val_score")
    assert client.get_metric_history(run.info.run_id, "router/calls")
    assert client.get_metric_history(run.info.run_id, "reflection/cost_usd")
    arts = {a.path for a in client.list_artifacts(run.info.run_id, "adaptive_gepa")}
    assert {"adaptive_gepa/run.json", "adaptive_gepa/report.md", "adaptive_gepa/learning_curve.png",
            "adaptive_gepa/best_library"} <= arts
    mlflow.set_tracking_uri(None)


def test_mlflow_attaches_to_an_active_run(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    mlflow.set_tracking_uri((tmp_path / "mlruns").as_uri())
    train, val = data()
    try:
        with mlflow.start_run(run_name="mine") as run:
            optimizer(use_mlflow=True).compile(dspy.Predict("question -> answer"), trainset=train, valset=val)
            assert mlflow.active_run().info.run_id == run.info.run_id     # left open for the caller
        got = mlflow.get_run(run.info.run_id)
        assert "best_val_score" in got.data.metrics and got.data.params["optimizer"] == "AdaptiveGEPA"
        assert len(mlflow.search_runs(output_format="list")) == 1        # no second run
    finally:
        mlflow.set_tracking_uri(None)


def test_mlflow_autolog_records_the_full_validations(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    mlflow.set_tracking_uri((tmp_path / "mlruns").as_uri())
    try:
        mlflow.dspy.autolog(log_compiles=True, log_evals=True, log_traces=False)
        from dspy.dsp.utils.settings import main_thread_config  # (this test's dspy.context shadows configure)
        train, val = data()
        with mlflow.start_run() as run, dspy.context(callbacks=main_thread_config["callbacks"]):
            res = optimizer().compile(dspy.Predict("question -> answer"), trainset=train,
                                      valset=val).detailed_results
        history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "eval_full")
        assert [h.value for h in history] == [100 * s for s in res.val_aggregate_scores]
    finally:
        mlflow.dspy.autolog(disable=True)
        mlflow.set_tracking_uri(None)


def test_wandb_through_its_api(monkeypatch, tmp_path):
    logged, configs, artifacts, finished = [], [], [], []

    class Run:
        config = types.SimpleNamespace(update=lambda d, allow_val_change=False: configs.append(d))

        def log(self, metrics, step):
            logged.append((step, metrics))

        def log_artifact(self, art):
            artifacts.append(art.dirs)

        def finish(self, exit_code=0):
            finished.append(exit_code)

    class Artifact:
        def __init__(self, name, type):
            self.dirs = []

        def add_dir(self, d):
            self.dirs.append(d)

    fake = types.SimpleNamespace(run=None, init=lambda **kw: Run(), login=lambda **kw: None, Artifact=Artifact)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    train, val = data()
    res = optimizer(use_wandb=True, wandb_init_kwargs={"project": "p"}).compile(
        dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
    assert configs and configs[0]["optimizer"] == "AdaptiveGEPA"
    assert [s for s, _ in logged] == [p["budget_at"] for p in res.proposals]
    assert artifacts and finished == [0]


def test_a_missing_tracker_package_is_an_error_before_the_search(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    from dspy_adaptive.data import InputError
    with pytest.raises(InputError, match="pip install wandb"):
        optimizer(use_wandb=True)


PRICED = "openai/gpt-4o-mini"


@pytest.fixture
def priced():
    """DSPy's model metadata loaded, as DSPy does on its first priced call (scripted engines are not priced by
    DSPy, so the tests load it themselves; LITELLM_LOCAL_MODEL_COST_MAP keeps it offline)."""
    from dspy.clients.model_metadata import _load
    _load()


def test_cost_ledger_per_role_and_per_proposal(tmp_path, priced):
    actor = scripted_lm(toy.actor_respond, model=PRICED)
    reflection = toy.reflection_lm()
    reflection.model = PRICED
    train, val = data()
    with dspy.context(lm=actor):
        routed = optimizer(reflection, log_dir=str(tmp_path)).compile(dspy.Predict("question -> answer"),
                                                                       trainset=train, valset=val)
    res = routed.detailed_results
    assert {"router", "fallback", "reflection"} <= set(res.usage)
    for r in ("router", "fallback", "reflection"):
        assert res.usage[r]["cost"] > 0 and res.usage[r]["prompt_tokens"] > 0
    per_proposal = sum(sum(v["cost"] for v in p["usage"].values()) for p in res.proposals)
    seed_cost = res.usage["fallback"]["cost"]   # (upper bound of) the seed validation, outside any proposal
    assert 0 < per_proposal <= res.cost_usd and res.cost_usd - per_proposal <= seed_cost + 1e-12
    assert any(p["usage"].get("reflection", {}).get("cost", 0) > 0 for p in res.proposals)
    report = (Path(tmp_path) / "report.md").read_text()
    assert "USD" in report and "| reflection |" in report and "Cost per proposal" in report


def test_max_cost_usd_stops_like_the_call_budget(priced):
    actor = scripted_lm(toy.actor_respond, model=PRICED)
    train, val = data()
    with dspy.context(lm=actor):
        unlimited = optimizer(max_metric_calls=200, use_merge=False).compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
        limit = unlimited.cost_usd / 3
        capped = optimizer(max_metric_calls=200, max_cost_usd=limit).compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val).detailed_results
    assert capped.stop_reason.startswith("cost limit reached")
    assert capped.budget["spent"] < unlimited.budget["spent"]
    # no new iteration once reached: the cost before the last proposal was still below the limit
    before_last = capped.cost_usd - sum(v["cost"] for v in capped.proposals[-1]["usage"].values())
    assert before_last < limit <= capped.cost_usd


def test_price_and_meter(priced):
    assert price(PRICED, {"prompt_tokens": 1000, "completion_tokens": 1000}) == pytest.approx(0.00075)
    assert price("scripted/x", {"prompt_tokens": 10}) is None
    assert price("scripted/x", {"cost": 0.5}) == 0.5
    meter = UsageMeter()
    with meter.active(), meter.child() as sub, role("router"):
        dspy.settings.usage_tracker.add_usage(PRICED, {"prompt_tokens": 1000, "completion_tokens": 0})
    assert sub.snapshot()["router"]["cost"] == meter.snapshot()["router"]["cost"] == pytest.approx(0.00015)
