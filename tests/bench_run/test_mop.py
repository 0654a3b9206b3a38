"""Issue 27 item 3: MoP as the official procedure runs it (paper Appendix D cites it): K by the penalised
inertia, demos per expert = total / N, instruction candidates from the other regions' demos in one shared pool
kept by APE score, and the region-based joint search always joined with the region's demos."""

from __future__ import annotations

import random

import dspy
import numpy as np
import pytest

from benchmarks.mop import (
    HashedTfidfEmbedder,
    SentenceTransformerEmbedder,
    assign_demos,
    choose_k,
    embedder_for,
    kmeans,
    minilm_available,
    mop_from_spec,
    run_mop,
    scaled_inertia,
)
from dspy_adaptive.program.routed import route_of
from dspy_adaptive.testing import scripted_lm


def _blobs(k: int, per: int = 8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, 6)) * 5
    return np.concatenate([c + rng.normal(scale=0.3, size=(per, 6)) for c in centers])


def test_k_is_the_least_penalised_inertia():
    X = _blobs(3)
    cents, labels, scores = choose_k(X, max_k=5, seed=0)
    assert len(cents) == 3 and sorted(scores) == [2, 3, 4, 5]
    for k, v in scores.items():                       # inertia(K) / inertia(1) + 0.02 K, on the same fit
        assert v == pytest.approx(scaled_inertia(X, kmeans(X, k, 0)[2], k))
    assert min(scores, key=scores.get) == 3
    assert all(len(set(labels[i:i + 8])) == 1 for i in (0, 8, 16)) and len(set(labels)) == 3
    heavy, _, penalised = choose_k(X, max_k=5, seed=0, alpha=1.0)   # a large per-cluster penalty: fewer clusters
    assert len(heavy) == 2 and min(penalised, key=penalised.get) == 2


def test_each_expert_gets_total_demos_over_n():
    train = [dspy.Example(request=f"q{i}", answer=str(i)).with_inputs("request") for i in range(12)] + \
            [dspy.Example(request=f"w{i}").with_inputs("request") for i in range(6)]       # no gold string
    labels = [0] * 9 + [1] * 3 + [2] * 6                  # region 0: 9 gold, region 1: 3 gold, region 2: none
    parts, trimmed, size = assign_demos(train, labels, 3, max_experts=5, rng=random.Random(0))
    assert size == 12 // 5 == 2
    assert [len(p) for p in parts] == [2, 2, 0]
    assert len(trimmed) == 7 + 1 and {d["request"] for d in parts[0]} <= {f"q{i}" for i in range(9)}
    parts, _, size = assign_demos(train[:12], [0] + [1] * 11, 2, max_experts=2, rng=random.Random(0))
    assert size == 6 and [d["request"] for d in parts[0]] == ["q0"] * 6   # a small region repeats its demos


def _demo_pairs(call) -> int:
    return sum(1 for m in call.messages if m["role"] == "user") - 1


def test_mop_stages_on_a_scripted_world():
    from benchmarks.data import load_mixture
    from dspy_adaptive.tasks import FAMILIES
    from dspy_adaptive.tasks.ifeval import evaluate_instructions
    from dspy_adaptive.tasks.metrics import MixtureMetric
    from dspy_adaptive.testing import ScriptedWorld
    from tests.conftest import SHARED_DATA

    mix = load_mixture("local", data_dir=SHARED_DATA, seed=43, sizes=dict.fromkeys(FAMILIES, (6, 4, 1)))
    world = ScriptedWorld(mix.train + mix.val + mix.test)
    refl = scripted_lm(world.reflection, model="scripted/reflection")
    actor = scripted_lm(world.actor, model="scripted/actor")
    metric = MixtureMetric(judge_lm=scripted_lm(world.judge, model="scripted/judge"),
                           ifeval_checker=evaluate_instructions)
    run = run_mop(trainset=mix.train, valset=mix.val, metric=metric, reflection_lm=refl, lm=actor,
                  embedder=HashedTfidfEmbedder(), num_threads=2, progress=False, ape_eval_rows=6)
    d, K = run.details, run.details["k"]
    # K by the penalised inertia
    assert K == int(min(d["scaled_inertia"], key=lambda k: (d["scaled_inertia"][k], int(k))))
    # demos per expert: total gold demos // N (12 HotpotQA + AIME rows // 5 = 2), none in gold-free regions
    gold = [ex for ex in mix.train if ex.get("answer") is not None]
    assert d["demos_per_expert"] == len(gold) // 5 == 2
    assert all(len(p) in (0, 2) for p in run.spec["demos"]) and any(run.spec["demos"])
    # generation reads the OTHER regions' demos (+ trimmed ones) into one pool
    for c in d["candidates"]:
        own = {x["request"] for x in run.spec["demos"][c["region"] - 1]}
        assert not (set(c["from"]) & own) or set(c["from"]) & own <= set(d["trimmed"])
    pool = [p["instruction"] for p in d["pool"]]
    assert pool[-1] == "" and len(pool) <= 4 + 1 and set(run.spec["instructions"]) <= set(pool)
    ape = [p["ape_score"] for p in d["pool"][:-1]]
    assert ape == sorted(ape, reverse=True)                                      # kept by APE score
    assert d["generated"] == K * 3 * (5 // K)                                     # compensate: 3 x N // K per region
    # every RBJS evaluation joins the expert's demos; APE scores use none
    calls = actor.scripted.calls
    with_demos = [c for c in calls if _demo_pairs(c) > 0]
    assert {_demo_pairs(c) for c in with_demos} <= {2}
    expected = sum(len(pool) * r["val"] for r in d["rbjs"] if r["demos"])
    assert len(with_demos) == expected > 0
    assert len(calls) - len(with_demos) == d["calls"]["ape"] + sum(len(pool) * r["val"] for r in d["rbjs"]
                                                                   if not r["demos"])
    # the native budget is every scored call
    assert run.metric_calls == d["calls"]["ape"] + d["calls"]["rbjs"] == \
        len(d["candidates"]) * 6 + sum(len(pool) * r["val"] for r in d["rbjs"])
    # the program routes by the nearest centroid and records the expert
    prog = mop_from_spec(run.spec)
    assert [len(e.demos) for e in prog.experts] == [len(p) for p in run.spec["demos"]]
    with dspy.context(lm=scripted_lm(lambda call: {"response": "ok"})):
        pred = prog(request=mix.val[0].request)
    assert route_of(pred).executed == prog.cluster_of(mix.val[0].request) + 1


def test_the_embedder_is_minilm_where_installed_else_hashed():
    if minilm_available():
        emb = embedder_for(None)
        assert isinstance(emb, SentenceTransformerEmbedder)
        X = emb.fit([]) and emb(["What is the capital of France?", "Which city is France's capital?",
                                 "Find the number of integers n with n^2 < 50."])
        assert X[0] @ X[1] > X[0] @ X[2] + 0.3
    else:
        assert isinstance(embedder_for(None), HashedTfidfEmbedder)
    assert isinstance(embedder_for("hashed"), HashedTfidfEmbedder)
