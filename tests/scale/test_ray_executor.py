"""executor="ray" on a local Ray: the same archive and budget as threads, and a dead actor loses no row."""

from __future__ import annotations

import os

import dspy
import pytest

from dspy_adaptive import AdaptiveGEPA
from tests.core import toy

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


def search(executor, metric=toy.metric, **kw):
    train, val = toy.make_examples(4), toy.make_examples(4, offset=100)
    with dspy.context(lm=toy.actor_lm()):
        res = AdaptiveGEPA(metric, reflection_lm=toy.reflection_lm(vary=True), max_metric_calls=60,
                           reflection_minibatch_size=4, seed=3, use_merge=False, track_stats=True, progress=False,
                           num_threads=2, executor=executor, **kw).compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val)
    out = routed_summary(res.detailed_results)
    res.close()
    return out


def routed_summary(d):
    return {"hashes": [lib.content_hash for lib in d.libraries], "scores": d.val_aggregate_scores,
            "budget": d.budget, "proposals": [(p["action"], p["accepted"], p["failure"]) for p in d.proposals]}


class PidMetric:
    """Records which process scored each row."""

    def __init__(self, path):
        self.path = str(path)

    def __call__(self, gold, pred, trace=None, pred_name=None, pred_trace=None):
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()}\n")
        return toy.metric(gold, pred, trace, pred_name, pred_trace)


def test_threads_and_ray_give_the_same_archive_and_budget(tmp_path):
    threads, on_ray = search("threads"), search("ray", metric=PidMetric(tmp_path / "pids"))
    assert on_ray == threads
    assert len(threads["hashes"]) >= 2                       # the search did archive an edit
    pids = set((tmp_path / "pids").read_text().split())
    assert pids and str(os.getpid()) not in pids             # every row ran in an actor, none in the driver


class DiesOnce:
    """A metric that kills the process it runs in the first time it scores one row (a crashed actor)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __call__(self, gold, pred, trace=None, pred_name=None, pred_trace=None):
        if gold.id == "a101" and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return toy.metric(gold, pred, trace, pred_name, pred_trace)


def test_a_dead_actor_loses_no_row_and_charges_none_twice(tmp_path):
    expected = search("threads")
    got = search("ray", metric=DiesOnce(tmp_path / "died"))
    assert (tmp_path / "died").exists()                      # an actor really died mid-batch
    assert got == expected                                   # its rows ran again elsewhere; counts unchanged


def test_ray_executor_needs_the_extra(monkeypatch):
    import builtins

    from dspy_adaptive.data import InputError
    real = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(InputError, match=r'pip install -e "\.\[ray\]"'):
        AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(), max_metric_calls=10, executor="ray")
    with pytest.raises(InputError, match="executor must be"):
        AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(), max_metric_calls=10, executor="dask")
    with pytest.raises(InputError, match="needs Ray"):      # an address alone asks for Ray too
        AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(), max_metric_calls=10, address="auto")


def test_an_address_means_ray_and_contradicting_it_is_refused():
    from dspy_adaptive.data import InputError
    opt = AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(), max_metric_calls=10, address="auto")
    assert opt.executor == "ray"
    assert AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(), max_metric_calls=10).executor == "threads"
    with pytest.raises(InputError, match="drop one"):
        AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(), max_metric_calls=10, executor="threads",
                     address="auto")


# -- issue 29, item 7: what the actors need is shipped to them, and what cannot reach them is refused first -----

LOCAL_METRIC = '''
import os

import dspy


def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    with open({pids!r}, "a") as f:
        f.write(str(os.getpid()) + "\\n")
    ok = str(pred.answer).strip() == gold.answer
    return dspy.Prediction(score=float(ok), feedback="correct" if ok else "wrong: expected another answer")
'''


def local_module(tmp_path, monkeypatch, name):
    """A module in a directory only the driver has on its path (as a metric next to the user's script)."""
    (tmp_path / f"{name}.py").write_text(LOCAL_METRIC.format(pids=str(tmp_path / "pids")))
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    return importlib.import_module(name)


def test_a_metric_in_the_users_own_module_runs_in_the_actors(tmp_path, monkeypatch):
    module = local_module(tmp_path, monkeypatch, "my_metric_29")
    from dspy_adaptive.search.ray_executor import user_modules
    assert user_modules([module.metric, toy.metric, dspy.Predict]) == [module, __import__("tests")]
    threads = search("threads", metric=module.metric)
    assert search("ray", metric=module.metric) == threads
    pids = set((tmp_path / "pids").read_text().split())
    assert str(os.getpid()) in pids and len(pids) >= 2        # the driver's (threads run) and the actors'
    assert "my_metric_29" not in ray.cloudpickle.list_registry_pickle_by_value()   # the run's shipping ended


def test_a_ray_this_run_starts_gets_the_users_modules_as_its_runtime_env(tmp_path, monkeypatch):
    from dspy_adaptive.search import ray_executor
    module = local_module(tmp_path, monkeypatch, "my_metric_29b")
    started = {}

    class Stop(Exception):
        pass

    def init(**kwargs):
        started.update(kwargs)
        raise Stop

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(Stop):
        ray_executor.RayExecutor(lambda: None, ship=ray_executor.user_modules([module.metric]))
    assert started["runtime_env"] == {"py_modules": [module]}


def test_an_unpicklable_lm_is_refused_before_any_lm_call():
    from dspy_adaptive.data import InputError
    from dspy_adaptive.testing import scripted_lm
    lm = scripted_lm(toy.actor_respond, model="scripted/holds-a-generator")
    lm.open_stream = (line for line in ["a live stream"])           # a generator: nothing can pickle it
    reflection = toy.reflection_lm()
    train, val = toy.make_examples(2), toy.make_examples(2, offset=100)
    with dspy.context(lm=lm), pytest.raises(InputError) as err:
        AdaptiveGEPA(toy.metric, reflection_lm=reflection, max_metric_calls=20, progress=False, num_threads=2,
                     executor="ray").compile(dspy.Predict("question -> answer"), trainset=train, valset=val)
    message = str(err.value)
    assert "configured LM (dspy.settings.lm)" in message and "scripted/holds-a-generator" in message
    assert "cannot be pickled" in message and 'executor="threads"' in message
    assert lm.scripted.calls == [] and reflection.scripted.calls == []           # nothing was spent


def test_an_unpicklable_metric_is_refused_by_name():
    import threading

    from dspy_adaptive.data import InputError
    guard = threading.Lock()

    def locked_metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        with guard:
            return toy.metric(gold, pred, trace, pred_name, pred_trace)

    with dspy.context(lm=toy.actor_lm()), pytest.raises(InputError, match=r"sends the metric \(.*locked_metric\)"):
        AdaptiveGEPA(locked_metric, reflection_lm=toy.reflection_lm(), max_metric_calls=20, progress=False,
                     executor="ray").compile(dspy.Predict("question -> answer"), trainset=toy.make_examples(2))
