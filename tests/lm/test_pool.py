"""lm_pool: one dspy.LM over several endpoints through litellm's Router, usage per endpoint (offline: mocks)."""

from __future__ import annotations

import json

import dspy

from dspy_adaptive import AdaptiveGEPA
from dspy_adaptive.lm.pool import endpoint_usage, lm_pool
from tests.core import toy


def endpoint(name, text):
    return {"api_base": f"http://{name}:8000/v1", "mock_response": text}


def test_requests_spread_over_endpoints_and_usage_is_counted_per_endpoint():
    answer = "[[ ## answer ## ]]\nok\n\n[[ ## completed ## ]]"
    lm = lm_pool("hosted_vllm/some/model", [endpoint("gpu1", answer), endpoint("gpu2", answer),
                                            endpoint("gpu3", answer)], cache=False)
    with dspy.context(lm=lm):
        outs = [dspy.Predict("q -> answer")(q=f"question {i}").answer for i in range(30)]
    assert outs == ["ok"] * 30
    usage = endpoint_usage(lm, toy.actor_lm())               # unpooled LMs are skipped
    assert sum(u["calls"] for u in usage.values()) == 30
    assert len(usage) >= 2 and set(usage) <= {"http://gpu1:8000/v1", "http://gpu2:8000/v1", "http://gpu3:8000/v1"}
    assert all(u["prompt_tokens"] > 0 for u in usage.values())


def test_a_search_records_its_endpoints(tmp_path):
    def respond_text(fields):
        return "\n\n".join(f"[[ ## {k} ## ]]\n{v}" for k, v in fields.items()) + "\n\n[[ ## completed ## ]]"

    # the fallback's answer is constant ("unknown"): the point is the endpoint record, not the scores
    actor = lm_pool("hosted_vllm/actor", [endpoint("a", respond_text({"answer": "unknown"})),
                                          endpoint("b", respond_text({"answer": "unknown"}))], cache=False)
    train, val = toy.make_examples(2), toy.make_examples(2, offset=100)
    AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(), max_metric_calls=12, reflection_minibatch_size=2,
                 use_merge=False, progress=False, fast_lm=actor, deep_lm=actor, log_dir=str(tmp_path)).compile(
        dspy.Predict("question -> answer"), trainset=train, valset=val).close()
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["endpoints"] and sum(e["calls"] for e in run["endpoints"].values()) >= len(val)
    assert "LM endpoints" in (tmp_path / "report.md").read_text()
