"""SIGTERM stops AdaptiveGEPA.compile as Ctrl-C does (issue 28): `Terminated` (a KeyboardInterrupt) in the main
thread, the rows dropped, the record kept, the rerun resumes, and the process's SIGTERM handler is restored."""

from __future__ import annotations

import json
import os
import signal

import dspy
import pytest

from dspy_adaptive import AdaptiveGEPA
from dspy_adaptive.optimizers.terminate import Terminated, sigterm_as_interrupt
from dspy_adaptive.testing import scripted_lm
from tests.core import toy


@pytest.fixture
def default_sigterm():
    """SIGTERM at its default action (another test in the session, e.g. ray.init, may have installed a handler)."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_sigterm_during_a_search_stops_it_and_the_rerun_resumes(tmp_path, default_sigterm):
    train, val = toy.make_examples(3), toy.make_examples(3, offset=100)
    inner = toy.reflection_lm()
    sent = {"n": 0}

    def reflect(call):                       # the first reflection call: someone runs `kill <pid>`
        if sent["n"] == 0:
            sent["n"] = 1
            os.kill(os.getpid(), signal.SIGTERM)
        return inner.scripted.respond(call)

    def optimizer(reflection):
        return AdaptiveGEPA(toy.metric, reflection_lm=reflection, max_metric_calls=40, reflection_minibatch_size=4,
                            seed=3, use_merge=False, progress=False, num_threads=1, log_dir=str(tmp_path / "run"))

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with dspy.context(lm=toy.actor_lm()):
        with pytest.raises(Terminated, match="SIGTERM"):
            optimizer(scripted_lm(reflect, model="scripted/reflection")).compile(
                dspy.Predict("question -> answer"), trainset=train, valset=val)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL          # the process's handler is back
        state = json.loads((tmp_path / "run" / "state.json").read_text())
        assert state["committed"] == [0] and state["budget"]["seed_validation"] == len(val)   # the record is kept
        routed = optimizer(toy.reflection_lm()).compile(dspy.Predict("question -> answer"), trainset=train,
                                                        valset=val)
    assert json.loads((tmp_path / "run" / "state.json").read_text())["budget"]["seed_validation"] == len(val)
    routed.close()


def test_an_application_handler_is_left_alone():
    def mine(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        with sigterm_as_interrupt() as installed:
            assert not installed and signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)
