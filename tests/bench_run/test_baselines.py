"""SandboxedFlex is a dspy.Flex to dspy.GEPA; rejected sources score as failures; MoP clustering pieces."""

from __future__ import annotations

import dspy
import numpy as np
from dspy.teleprompt.bootstrap_trace import FailedPrediction
from dspy.teleprompt.gepa.gepa_flex_utils import enumerate_flex_submodules, evaluate_with_trace, rebind_flex_code

from benchmarks.baselines import (
    HashedTfidfEmbedder,
    LabelRoutedProgram,
    SandboxedFlex,
    choose_clusters,
    mop_from_spec,
    silhouette,
)
from dspy_adaptive import route_of
from dspy_adaptive.sandbox import SandboxPool, tool_calls_of
from dspy_adaptive.testing import scripted_lm

GOOD = '''class Upper(dspy.Module):
    def __init__(self):
        super().__init__()
        self.p = dspy.Predict("request -> response", instructions="echo")

    def forward(self, request):
        return dspy.Prediction(response=self.p(request=request).response.upper() + str(len(search(query=request))))
'''


def _actor(call):
    return {"response": (call.field("request") or "").lower()}


def _metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    return dspy.Prediction(score=float(getattr(pred, "response", None) == gold.answer), feedback="fb")


def test_sandboxed_flex_is_a_flex_to_gepa_and_runs_in_our_sandbox():
    lm = scripted_lm(_actor)
    with SandboxPool(max_workers=1, tool_names=("search",)) as pool:
        flex = SandboxedFlex(tools={"search": lambda query, k=3: ["a", "b"]}, lm=lm, pool=pool)
        assert isinstance(flex, dspy.Flex) and enumerate_flex_submodules(flex) == {"self": flex}
        assert "dspy.Predict" in flex.module_src and flex(request="Hi").response == "hi"    # P0 behaviour
        copy = flex.deepcopy()
        rebind_flex_code(copy, {"self": GOOD})
        assert copy.module_src == GOOD and flex.module_src != GOOD
        pred = copy(request="Hi")
        assert pred.response == "HI2"                                         # predictor + tool bridged
        calls = tool_calls_of(pred)       # what the module really sent through tools, for the PUPA metric
        assert [(c.name, dict(c.kwargs)) for c in calls] == [("search", {"query": "Hi"})]
        batch = [dspy.Example(request="x", answer="X2").with_inputs("request")]
        ok = evaluate_with_trace(copy, batch, metric_fn=_metric, num_threads=1, failure_score=0.0,
                                 callback_metadata={}, capture_traces=True)
        assert ok.scores == [1.0]


def test_policy_rejected_source_scores_failure_not_crash():
    with SandboxPool(max_workers=1, tool_names=()) as pool:
        flex = SandboxedFlex(lm=scripted_lm(_actor), pool=pool)
        rebind_flex_code(flex, {"self": "import os\n" + GOOD})
        batch = [dspy.Example(request="x", answer="X").with_inputs("request")] * 2
        res = evaluate_with_trace(flex, batch, metric_fn=_metric, num_threads=1, failure_score=0.0,
                                  callback_metadata={}, capture_traces=True)
        assert res.scores == [0.0, 0.0]
        pred = res.trajectories[0]["prediction"]
        assert isinstance(pred, FailedPrediction) and "policy" in pred.completion_text and "os" in pred.completion_text


def test_label_routed_program_uses_the_true_family():
    a, b = dspy.Predict("request -> response"), dspy.Predict("request -> response")
    prog = LabelRoutedProgram({"aime": a, "pupa": b})
    assert prog.for_example(dspy.Example(request="q", family="pupa")) is b


def test_clustering_separates_two_obvious_groups_and_routes_by_nearest_centroid():
    texts = [f"solve the equation x plus {i} equals {i + 2}" for i in range(6)] + \
            [f"who was the king of country {c} in history" for c in "abcdef"]
    emb = HashedTfidfEmbedder(dim=256).fit(texts)
    X = emb(texts)
    cents, labels, sil = choose_clusters(X, max_k=5, seed=0)
    assert len(set(labels[:6])) == 1 and len(set(labels[6:])) == 1 and labels[0] != labels[6]
    assert silhouette(X, labels) > 0 and max(sil, key=sil.get) == len(cents)
    spec = {"embedder": emb.state(), "centroids": cents.tolist(), "instructions": ["i1"] * len(cents)}
    prog = mop_from_spec(spec)
    assert prog.cluster_of(texts[0]) == labels[0] and prog.cluster_of(texts[7]) == labels[7]
    with dspy.context(lm=scripted_lm(lambda call: {"response": "ok"})):
        pred = prog(request=texts[7])
    assert route_of(pred).executed == labels[7] + 1
    assert np.allclose(HashedTfidfEmbedder(256, emb.state()["idf"])(texts), X)


def test_the_fpa_sandbox_note_lists_the_policy_allow_list():
    import re

    from benchmarks.baselines import SANDBOX_NOTE
    from dspy_adaptive.sandbox import ALLOWED_MODULES

    listed = re.search(r"Allowed imports: (.*?) -- ", SANDBOX_NOTE).group(1)
    assert [m.strip() for m in listed.split(",")] == list(ALLOWED_MODULES)


def test_mop_keeps_region_demos_for_gold_families_and_induces_instructions_ape_style():
    """Issue 15 item 7 (paper Appendix D): demonstrations from each region's requests that have a gold output
    string (HotpotQA, AIME), none from PUPA / LiveBench-IF; APE induction reads input -> output pairs;
    the joint search scores every (instruction, demos) pair on the region's validation rows."""
    from benchmarks.baselines import demo_output, run_mop
    from benchmarks.data import load_mixture
    from dspy_adaptive.tasks import FAMILIES
    from dspy_adaptive.tasks.metrics import MixtureMetric
    from dspy_adaptive.testing import ScriptedWorld
    from tests.conftest import SHARED_DATA

    mix = load_mixture("local", data_dir=SHARED_DATA, seed=43, sizes=dict.fromkeys(FAMILIES, (4, 3, 1)))
    world = ScriptedWorld(mix.train + mix.val + mix.test)
    refl = scripted_lm(world.reflection, model="scripted/reflection")
    actor = scripted_lm(world.actor, model="scripted/actor")
    judge = scripted_lm(world.judge, model="scripted/judge")
    from dspy_adaptive.tasks.ifeval import evaluate_instructions
    run = run_mop(trainset=mix.train, valset=mix.val, metric=MixtureMetric(judge_lm=judge,
                  ifeval_checker=evaluate_instructions), reflection_lm=refl, lm=actor, num_threads=2, progress=False)
    gold_requests = {ex.request: demo_output(ex) for ex in mix.train if demo_output(ex) is not None}
    assert gold_requests and all(ex.family in ("hotpotqa", "aime") for ex in mix.train
                                 if demo_output(ex) is not None)
    for cluster, demos in zip(run.details["clusters"], run.spec["demos"]):
        assert all(gold_requests.get(d["request"]) == d["response"] for d in demos)   # gold strings only
        n_demo_sets = 2 if cluster["gold_demos"] else 1
        assert len(cluster["candidates"]) == n_demo_sets * len({c["instruction"] for c in cluster["candidates"]})
    assert any(c["gold_demos"] for c in run.details["clusters"])
    assert run.metric_calls == sum(c["val"] * len(c["candidates"]) for c in run.details["clusters"])
    ape = [c.prompt for c in refl.scripted.calls] if hasattr(refl.scripted, "calls") else refl.scripted.prompts()
    assert any("Input:" in p and "Output:" in p for p in ape)                          # input -> gold output
    prog = mop_from_spec(run.spec)
    assert [len(e.demos) for e in prog.experts] == [len(d) for d in run.spec["demos"]]
