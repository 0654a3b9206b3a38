"""Nothing shared carries a label: the LM response cache, host-side predictor caches and logs, tried as an
attacker would (content and timing), with a real `dspy.LM` whose response cache is ON.

The LM answers each call with a fresh number ("v<n>", the n-th call it served) after 60 ms, so a cache hit
shows in the content (an old number) and in the time (well under 60 ms). The attacker is a policy-accepted
specialist timing its own calls with `datetime.now()`.
"""

from __future__ import annotations

import logging

import dspy
import pytest
from dspy.clients.cache import Cache

from dspy_adaptive import Library, RoutedProgram, Slot
from dspy_adaptive.sandbox import SandboxPool, scope
from dspy_adaptive.testing import ScriptedEngine

LATENCY = 0.25     # an LM call; a cache hit (a bridge round trip) is far faster, also on a loaded machine
JUDGE_SIG = "question, reference -> verdict"


def counting_lm(model: str = "scripted/counter", cache: bool = True) -> dspy.LM:
    engine: ScriptedEngine

    def respond(call):
        if "slot" in call.output_fields:
            return {"slot": "1"}
        return {name: f"v{len(engine.calls)}" for name in call.output_fields}

    engine = ScriptedEngine(respond, latency=LATENCY, model=model)
    lm = dspy.LM(model, engine=engine, cache=cache, num_retries=0)
    lm.scripted = engine
    return lm


@pytest.fixture
def memory_cache(monkeypatch):
    """DSPy's process-wide cache for this test: memory only (no disk in the home directory)."""
    cache = Cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir=None)
    monkeypatch.setattr(dspy, "cache", cache)
    return cache


PROBE = '''import datetime

class Probe(dspy.Module):
    def __init__(self):
        super().__init__()
        self.judge = dspy.Predict("question, reference -> verdict")

    def forward(self, question):
        seen, times = [], []
        for guess in GUESSES:
            t0 = datetime.datetime.now()
            seen.append(self.judge(question=question, reference=guess).verdict)
            times.append((datetime.datetime.now() - t0).total_seconds())
        return dspy.Prediction(answer=seen[0], seen=seen, times=times)
'''


def routed(source: str, lm, pool: SandboxPool) -> RoutedProgram:
    lib = Library.empty(2).with_slot(1, Slot().activated("everything", source, "fast"))
    return RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=lm, deep_lm=lm, sandbox=pool)


@pytest.fixture(scope="module")
def bridge_pool():
    with SandboxPool(max_workers=2, timeout=10) as p:
        yield p


def probe(guesses: list[str]) -> str:
    return PROBE.replace("GUESSES", repr(guesses))


def test_the_judges_cached_answers_are_invisible_to_a_specialist(memory_cache, bridge_pool):
    """The metric's judge has seen the reference ("Paris") for this question; the specialist guesses among
    candidates and watches for a fast (cached) answer. Every probe goes to the LM."""
    lm = counting_lm()
    judge = dspy.Predict(JUDGE_SIG)
    with dspy.context(lm=lm):
        judged = judge(question="capital of France?", reference="Paris").verdict      # the judge's entry
        assert judge(question="capital of France?", reference="Paris").verdict == judged   # DSPy's cache works
    program = routed(probe(["Lyon", "Paris", "Nice"]), lm, bridge_pool)
    with dspy.context(lm=lm):
        out = program(question="capital of France?")
    assert judged not in out.seen                              # no content from the judge's entry
    assert min(out.times) >= 0.8 * LATENCY, out.times          # and no timing difference: all went to the LM
    assert len(set(out.seen)) == 3


def test_nothing_crosses_from_one_request_to_the_next(memory_cache, bridge_pool):
    """Request 1 'writes' a secret bit by asking a predictor something; request 2 probes for it by timing."""
    lm = counting_lm()
    writer = routed(probe(["bit=1"]), lm, bridge_pool)
    reader = routed(probe(["bit=0", "bit=1"]), lm, bridge_pool)
    with dspy.context(lm=lm):
        written = writer(question="channel").seen[0]
        out = reader(question="channel")
    assert written not in out.seen and min(out.times) >= 0.8 * LATENCY, (written, out.seen, out.times)
    cached = [str(v) for v in memory_cache.memory_cache.values()]   # the router's call (trusted) is cached,
    assert cached and all("verdict" not in v for v in cached)        # none of the specialist's calls


def test_within_one_request_a_repeated_call_is_served_from_that_requests_own_cache(memory_cache, bridge_pool):
    lm = counting_lm()
    program = routed(probe(["same", "same", "other"]), lm, bridge_pool)
    with dspy.context(lm=lm):
        out = program(question="q")
    assert out.seen[0] == out.seen[1] != out.seen[2]
    assert out.times[1] < 0.5 * LATENCY <= LATENCY * 0.8 <= out.times[2]


def test_an_earlier_runs_disk_cache_is_invisible(tmp_path, monkeypatch, bridge_pool):
    """Run 1's judge wrote to DSPy's disk cache; run 2 (a fresh process: an empty memory cache on the same
    directory) has a specialist probe for it."""
    lm = counting_lm()
    monkeypatch.setattr(dspy, "cache", Cache(enable_disk_cache=True, enable_memory_cache=True,
                                             disk_cache_dir=str(tmp_path)))
    with dspy.context(lm=lm):
        judged = dspy.Predict(JUDGE_SIG)(question="test label?", reference="42").verdict
    dspy.cache.disk_cache.close()
    run2 = Cache(enable_disk_cache=True, enable_memory_cache=True, disk_cache_dir=str(tmp_path))
    monkeypatch.setattr(dspy, "cache", run2)
    with dspy.context(lm=lm):
        assert dspy.Predict(JUDGE_SIG)(question="test label?", reference="42").verdict == judged   # it is there
        out = routed(probe(["41", "42"]), lm, bridge_pool)(question="test label?")
    assert judged not in out.seen and min(out.times) >= 0.8 * LATENCY
    run2.disk_cache.close()


def test_a_tool_that_calls_an_lm_is_scoped_too(memory_cache):
    """A user's tool (here: an external assistant on the same cached LM) runs inside the request's scope."""
    lm = counting_lm()

    def ask(request: str) -> str:
        return lm(request)[0]

    src = '''import datetime

class Asker(dspy.Module):
    def forward(self, question):
        times, seen = [], []
        for text in ["hello", "hello"]:
            t0 = datetime.datetime.now()
            seen.append(ask(request=text))
            times.append((datetime.datetime.now() - t0).total_seconds())
        return dspy.Prediction(answer=seen[0], seen=seen, times=times)
'''
    lm("hello")                                   # the host asked the same thing before (outside any request)
    with SandboxPool(max_workers=1, timeout=10, tool_names=("ask",)) as pool:
        lib = Library.empty(2).with_slot(1, Slot().activated("everything", src, "fast"))
        program = RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=lm, deep_lm=lm, tools={"ask": ask},
                                sandbox=pool)
        with dspy.context(lm=lm):
            out = program(question="q")
    assert out.times[0] >= 0.8 * LATENCY          # the host's earlier entry is not visible...
    assert out.seen[0] == out.seen[1] and out.times[1] < 0.5 * LATENCY   # ...its own first call is


def test_predictors_a_request_creates_are_its_own(bridge_pool):
    """A predictor made in forward (not discovered in __init__) is built for the request that asked for it:
    building a signature costs host time, so a shared one would tell a later request what an earlier asked."""
    src = '''class Maker(dspy.Module):
    def forward(self, question):
        p = dspy.Predict("secret_field_one -> out", instructions=question)
        return dspy.Prediction(answer=p(secret_field_one="x").out)
'''
    lm = counting_lm(cache=False)
    program = routed(src, lm, bridge_pool)
    seen = []
    real = dspy.Predict.forward

    def spy(self, **kwargs):
        seen.append(self)
        return real(self, **kwargs)

    with pytest.MonkeyPatch.context() as mp, dspy.context(lm=lm):
        mp.setattr(dspy.Predict, "forward", spy)
        program(question="same instructions")
        program(question="same instructions")
    makers = [p for p in seen if "secret_field_one" in p.signature.input_fields]
    assert len(makers) == 2 and makers[0] is not makers[1] and makers[0].signature is not makers[1].signature
    assert program.predictor_label(makers[1]) == "slot1.anonymous_predict_1"      # still named in traces


def test_log_records_made_in_a_request_scope_are_bounded(caplog):
    log = logging.getLogger("dspy.predict.predict")
    with caplog.at_level(logging.WARNING, logger="dspy"):
        with scope.RequestScope().active():
            log.warning("Type mismatch: %s", "x" * 1_000_000)
            try:
                raise ValueError("y" * 1_000_000)
            except ValueError:
                log.exception("failed")
        log.warning("outside: %s", "z" * 10_000)      # the host's own logging is untouched
    texts = [r.getMessage() + (r.exc_text or "") for r in caplog.records]
    assert len(texts) == 3 and all(len(t) < scope.LOG_LIMIT + 200 for t in texts[:2]) and len(texts[2]) > 10_000


def test_outside_a_scope_dspy_cache_is_dspys_own(memory_cache):
    lm = counting_lm()
    with scope.RequestScope().active():
        pass                                          # installs the wrapper
    assert isinstance(vars(dspy)["cache"], scope._ScopedCache)
    with dspy.context(lm=lm):
        a = dspy.Predict(JUDGE_SIG)(question="q", reference="r").verdict
        b = dspy.Predict(JUDGE_SIG)(question="q", reference="r").verdict
    assert a == b and len(memory_cache.memory_cache) == 1 and len(lm.scripted.calls) == 1
