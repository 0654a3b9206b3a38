"""A RoutedProgram served by its distilled router: fewer LM router calls, the LM router below the threshold, the
state saved and loaded (in a fresh process), dropped when the library changes, refused when tampered with."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import cloudpickle
import dspy
import pytest

from dspy_adaptive import route_of
from dspy_adaptive.distill import DistilledRouter, DistilledRouterError, DistillError, DistillSettings
from tests.distill import common

REPO = Path(__file__).resolve().parents[2]
FAST = DistillSettings(candidates=("binary-word", "tfidf-word"), folds=3)
PROBES = ["add: 41 1", "reverse: tablet", "upper: tablet please", "add: 7 8", "reverse: orange"]


@pytest.fixture
def served():
    routed = common.program()
    lm = routed.fast_lm
    d = routed.distill_router(common.requests(8), FAST)
    yield routed, lm, d
    routed.close()


def run(routed, question):
    pred = routed(question=question)
    return pred, route_of(pred)


def test_confident_requests_are_routed_without_the_lm_router(served):
    routed, lm, d = served
    assert routed.distilled_router is d and d.training["labelling"]["router_calls"] == 24
    before = common.router_calls(lm)
    answers = {q: run(routed, q) for q in PROBES}
    assert common.router_calls(lm) == before                        # no LM router call at all
    assert answers["add: 41 1"][0].answer == "42" and answers["reverse: tablet"][0].answer == "telbat"
    assert answers["upper: tablet please"][1].executed == 0
    assert {r.decided_by for _, r in answers.values()} == {"distilled"}
    assert all(r.confidence >= d.threshold for _, r in answers.values())


def test_a_request_under_the_threshold_calls_the_lm_router(served):
    routed, lm, d = served
    confidence = {q: d.decide({"question": q}).confidence for q in PROBES}
    low = min(PROBES, key=confidence.get)
    high = max(PROBES, key=confidence.get)
    assert confidence[high] > confidence[low]
    routed.use_distilled_router(d.with_threshold(min(1.0, confidence[low] + 1e-12)))
    before = common.router_calls(lm)
    _, route = run(routed, low)
    assert common.router_calls(lm) == before + 1                     # it asked the LM router
    assert route.decided_by == "lm" and route.confidence == pytest.approx(confidence[low])
    _, route = run(routed, high)
    assert common.router_calls(lm) == before + 1 and route.decided_by == "distilled"


def test_save_and_load_in_a_fresh_process_keep_the_classifier(served, tmp_path):
    routed, _, d = served
    path = tmp_path / "routed.json"
    routed.save(str(path))
    child = f"""
import json, dspy
from dspy_adaptive import route_of
from tests.distill import common
routed = common.program()
routed.load({str(path)!r})
d = routed.distilled_router
out = {{"threshold": d.threshold, "classes": list(d.classes), "chosen": d.training["chosen"],
       "decisions": [[x.slot, x.confidence] for x in d.decide_texts({PROBES!r})],
       "answers": [routed(question=q).answer for q in {PROBES!r}], "router_calls": common.router_calls(routed.fast_lm),
       "decided_by": [route_of(routed(question=q)).decided_by for q in {PROBES!r}]}}
print(json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-c", child], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                               "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["threshold"] == d.threshold and out["classes"] == list(d.classes)
    assert out["chosen"] == d.training["chosen"]
    assert out["decisions"] == [[x.slot, x.confidence] for x in d.decide_texts(PROBES)]   # bit for bit
    assert out["router_calls"] == 0 and set(out["decided_by"]) == {"distilled"}
    assert out["answers"][0] == "42"


def test_pickling_keeps_it(served):
    routed, _, d = served
    back = cloudpickle.loads(cloudpickle.dumps(routed))        # what save(save_program=True) does
    assert back.distilled_router is not None and back.distilled_router.to_dict() == d.to_dict()


def test_a_changed_library_drops_it_and_the_lm_router_decides(served, caplog):
    routed, lm, d = served
    same = routed.with_library(routed.library)
    assert same.distilled_router is d                                 # the same library: still bound
    other = routed.with_library(routed.library.with_slot(2, routed.library.slot(2).deactivated()))
    with caplog.at_level(logging.WARNING):
        assert other.distilled_router is None
    assert "library changed" in caplog.text
    before = common.router_calls(lm)
    _, route = run(other, "reverse: tablet")
    assert common.router_calls(lm) == before + 1 and route.decided_by == "lm" and route.executed == 0
    assert routed.distilled_router is d                               # the original keeps its own
    # the router text rewritten in place (what dspy.GEPA does to the router predictor): dropped at the next call
    routed.router.signature = routed.router.signature.with_instructions("Route carefully.")
    _, route = run(routed, "add: 1 2")
    assert route.decided_by == "lm" and routed.distilled_router is None
    assert "distilled_router" not in routed.dump_state()


def test_changed_router_demos_drop_it(served):
    routed, _, _ = served
    routed.router.demos = [dspy.Example(question="add: 1 1", specialists="...", slot="1")]
    assert routed.distilled_router is None


def test_a_saved_router_for_another_library_is_dropped_on_load(served, tmp_path, caplog):
    routed, _, _ = served
    state = routed.dump_state()
    state["library"]["router"] = "An edited router instruction."
    fresh = common.program()
    with caplog.at_level(logging.WARNING):
        fresh.load_state(state)
    assert fresh.distilled_router is None and "not for this program" in caplog.text
    assert fresh.library.router == "An edited router instruction."


@pytest.mark.parametrize("edit, words", [
    (lambda s: s["distilled_router"]["coef"][0].__setitem__(0, 123.0), "checksum does not match"),
    (lambda s: s["distilled_router"].__setitem__("threshold", 0.0), "checksum does not match"),
    (lambda s: s.__setitem__("distilled_router", "not an object"), "expected a JSON object"),
    (lambda s: s["distilled_router"].pop("coef"), "missing keys ['coef']"),
])
def test_a_malformed_or_tampered_saved_router_is_refused_before_anything_loads(served, tmp_path, edit, words):
    routed, _, _ = served
    path = tmp_path / "routed.json"
    routed.save(str(path))
    state = json.loads(path.read_text())
    edit(state)
    path.write_text(json.dumps(state))
    fresh = common.program(lib=common.library().with_router("The original router."))
    with pytest.raises(DistilledRouterError, match="refusing the distilled router") as err:
        fresh.load(str(path))
    assert words in str(err.value)
    assert fresh.library.router == "The original router."            # nothing was loaded
    assert fresh.distilled_router is None


def test_export_shows_it_as_data(served, tmp_path):
    routed, _, d = served
    out = routed.export(tmp_path / "lib")
    back = DistilledRouter.from_json((out / "distilled_router.json").read_text())
    assert back.to_dict() == d.to_dict()
    text = (out / "distilled_router.txt").read_text()
    assert "threshold" in text and "LM router decides" in text and d.binding.library_hash[:12] in text
    bare = common.program()
    bare.export(tmp_path / "bare")
    assert not (tmp_path / "bare" / "distilled_router.json").exists()


def test_a_router_for_another_program_is_refused_when_attached(served):
    _, _, d = served
    other = common.program(lib=common.library().with_router("Another router."))
    with pytest.raises(DistilledRouterError, match="library changed"):
        other.use_distilled_router(d)


def test_distilling_a_program_with_one_choice_raises_and_keeps_the_lm_router():
    routed = common.program()
    with pytest.raises(DistillError, match="fewer than two slots"):
        routed.distill_router([e for e in common.requests(8) if e.question.startswith("add:")], FAST)
    assert routed.distilled_router is None


def test_an_embedding_candidate_is_data_too_and_needs_its_embedder_to_serve(tmp_path, caplog):
    import hashlib

    import numpy as np

    from dspy_adaptive.distill import register_embedder
    from dspy_adaptive.distill.embed import unregister_embedder

    def hashed(texts):                                   # a deterministic stand-in for a sentence embedder
        out = np.zeros((len(texts), 32))
        for i, t in enumerate(texts):
            for w in t.lower().replace(":", " ").split():
                out[i, int(hashlib.sha1(w.encode()).hexdigest(), 16) % 32] += 1.0
        return out

    register_embedder("test-hashed", hashed)
    try:
        routed = common.program()
        d = routed.distill_router(common.requests(8), DistillSettings(candidates=("embedding:test-hashed",), folds=3))
        assert d.features.kind == "embedding" and d.features.dim == 32 and d.coef.shape[1] == 32
        assert [x.slot for x in d.decide_texts(["add: 3 4", "reverse: lamp"])] == [1, 2]
        state = json.loads(json.dumps(routed.dump_state()))
        assert state["distilled_router"]["features"] == {"kind": "embedding", "embedder": "test-hashed", "dim": 32}
    finally:
        unregister_embedder("test-hashed")
    fresh = common.program()
    with caplog.at_level(logging.WARNING):
        fresh.load_state(state)                          # no such embedder here: dropped, the LM router serves
    assert fresh.distilled_router is None and "not available here" in caplog.text
