"""SandboxedFlex is a dspy.Flex to dspy.GEPA; rejected sources score as failures; old MoP specs (see test_mop)."""

from __future__ import annotations

import dspy
import numpy as np
from dspy.teleprompt.bootstrap_trace import FailedPrediction
from dspy.teleprompt.gepa.gepa_flex_utils import enumerate_flex_submodules, evaluate_with_trace, rebind_flex_code

from benchmarks.baselines import (
    HashedTfidfEmbedder,
    LabelRoutedProgram,
    SandboxedFlex,
    mop_from_spec,
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


def test_old_mop_specs_still_route_by_cosine():
    """Runs recorded before issue 27 stored normalised centroids and routed by cosine similarity."""
    texts = [f"solve the equation x plus {i} equals {i + 2}" for i in range(6)] + \
            [f"who was the king of country {c} in history" for c in "abcdef"]
    emb = HashedTfidfEmbedder(dim=256).fit(texts)
    X = emb(texts)
    cents = np.stack([X[:6].mean(axis=0), X[6:].mean(axis=0)])
    cents /= np.linalg.norm(cents, axis=1, keepdims=True)
    prog = mop_from_spec({"embedder": emb.state(), "centroids": cents.tolist(), "instructions": ["i1", "i2"]})
    assert prog.routing == "cosine" and prog.cluster_of(texts[0]) == 0 and prog.cluster_of(texts[7]) == 1
    with dspy.context(lm=scripted_lm(lambda call: {"response": "ok"})):
        pred = prog(request=texts[7])
    assert route_of(pred).executed == 2


def test_the_fpa_sandbox_note_lists_the_policy_allow_list():
    import re

    from benchmarks.baselines import SANDBOX_NOTE
    from dspy_adaptive.sandbox import ALLOWED_MODULES

    listed = re.search(r"Allowed imports: (.*?) -- ", SANDBOX_NOTE).group(1)
    assert [m.strip() for m in listed.split(",")] == list(ALLOWED_MODULES)
