"""Family-balanced minibatches over the real mixture's feedback set."""

import random
from collections import Counter

import dspy
import pytest

from benchmarks.data import load_mixture
from dspy_adaptive.tasks.sampler import FamilyBalancedSampler, balanced_quotas, family_balanced_sampler


@pytest.fixture(scope="module")
def train():
    from tests.conftest import require_shared_data
    return load_mixture(data_dir=require_shared_data()).train


@pytest.mark.parametrize("epoch", [True, False])
def test_six_per_family_and_subtasks_balanced(train, epoch):
    sampler, rng = FamilyBalancedSampler(epoch=epoch), random.Random(0)
    lb_totals = Counter()
    for _ in range(40):
        idx = sampler(train, 24, rng)
        assert len(idx) == 24 == len(set(idx)) and all(0 <= i < len(train) for i in idx)
        assert Counter(train[i].family for i in idx) == {"hotpotqa": 6, "aime": 6, "pupa": 6, "livebench_if": 6}
        sub = Counter(train[i].subtask for i in idx if train[i].family == "livebench_if")
        assert len(sub) == 4 and sorted(sub.values()) == [1, 1, 2, 2]
        lb_totals.update(sub)
    assert max(lb_totals.values()) - min(lb_totals.values()) <= 20   # remainders rotate across subtasks


def test_epoch_style_no_repeats_before_a_family_is_exhausted(train):
    sampler, rng = FamilyBalancedSampler(epoch=True), random.Random(1)
    batches = [sampler(train, 24, rng) for _ in range(7)]
    aime = [i for b in batches for i in b if train[i].family == "aime"]
    assert len(aime) == 42 == len(set(aime))                 # 45 AIME items: 7 batches of 6, all distinct
    pupa = [i for b in batches[:2] for i in b if train[i].family == "pupa"]
    assert len(set(pupa)) == 12                               # 15 PUPA items
    hot = [i for i in sampler(train, 24, rng) if train[i].family == "hotpotqa"]
    assert len(hot) == len(set(hot)) == 6


def test_deterministic_given_rng_and_state_roundtrip(train):
    a = [FamilyBalancedSampler()(train, 24, random.Random(5)) for _ in range(2)]
    assert a[0] == a[1]
    s1, s2 = FamilyBalancedSampler(), FamilyBalancedSampler()
    r1, r2 = random.Random(9), random.Random(9)
    assert [s1(train, 24, r1) for _ in range(5)] == [s2(train, 24, r2) for _ in range(5)]
    state, rng_state = s1.state_dict(), r1.getstate()
    nxt = s1(train, 24, r1)
    s3, r3 = FamilyBalancedSampler(), random.Random()
    s3.load_state_dict(state)
    r3.setstate(rng_state)
    assert s3(train, 24, r3) == nxt
    assert FamilyBalancedSampler(epoch=False)(train, 24, random.Random(3)) == \
        FamilyBalancedSampler(epoch=False)(train, 24, random.Random(3))


def test_small_families_pass_their_shortfall_on(train):
    idx = family_balanced_sampler(train, 100, random.Random(0))
    counts = Counter(train[i].family for i in idx)
    assert counts["hotpotqa"] == 7 and counts["pupa"] == 15 and sum(counts.values()) == 100
    assert len(family_balanced_sampler(train[:5], 24, random.Random(0))) == 5


def test_unlabelled_examples_are_refused():
    exs = [dspy.Example(id=str(i), request="r").with_inputs("request") for i in range(3)]
    with pytest.raises(ValueError, match="family"):
        FamilyBalancedSampler()(exs, 2, random.Random(0))


def test_works_through_the_engine_hook(train):
    from dspy_adaptive.search.sampling import sample_minibatch
    idx = sample_minibatch(FamilyBalancedSampler(), train, 24, random.Random(0))
    assert len(idx) == 24


def test_balanced_quotas():
    q = balanced_quotas(6, {"a": 10, "b": 10, "c": 10, "d": 10}, random.Random(0))
    assert sorted(q.values()) == [1, 1, 2, 2]
    q = balanced_quotas(24, {"a": 2, "b": 50, "c": 50, "d": 50}, random.Random(0))
    assert q["a"] == 2 and sum(q.values()) == 24 and max(q.values()) - min(q["b"], q["c"], q["d"]) <= 1
