"""benchmarks.local_models: routing accuracy counts where each family's requests went, both ways of asking."""

from __future__ import annotations

import dspy
import pytest

from benchmarks.distill_demo import library
from benchmarks.local_models import family_slots, routing, table
from dspy_adaptive import RoutedProgram
from dspy_adaptive.demo.run import demo_examples
from dspy_adaptive.tasks.programs import SeedProgram
from dspy_adaptive.testing import scripted_lm


def _routed(answer):
    train, val, _test = demo_examples()
    requests = train + val
    slot_of = {ex.request: family_slots()[ex.family] for ex in requests}

    def respond(call):
        found = [slot for text, slot in slot_of.items() if text in call.prompt]
        return {"slot": answer(found[0] if found else 0)}

    lm = scripted_lm(respond)
    return RoutedProgram(SeedProgram(), library(["search"]), fast_lm=lm, deep_lm=lm), requests, lm


@pytest.mark.parametrize("constrained", [False, True])
def test_a_router_that_knows_the_families_scores_one(constrained):
    routed, requests, lm = _routed(str)
    with dspy.context(lm=lm):
        r = routing(routed, requests, constrained=constrained)
    assert r["accuracy"] == 1.0 and r["requests"] == 64 and r["chance"] == pytest.approx(1 / 5)
    assert r["by_family"]["hotpotqa"] == {str(family_slots()["hotpotqa"]): 16}
    routed.close()


def test_out_of_range_answers_count_as_misses_and_the_constrained_router_refuses_them():
    routed, requests, lm = _routed(lambda slot: "12")       # what SmolLM2-135M often answers
    with dspy.context(lm=lm):
        free = routing(routed, requests, constrained=False)
        constrained = routing(routed, requests, constrained=True)
    assert free["accuracy"] == 0.0 and free["by_family"]["aime"] == {"12": 16}
    assert constrained["accuracy"] == 0.0 and constrained["by_family"]["aime"] == {"unparseable": 16}
    routed.close()
    assert "| m | 0.0% | 0.0% | 20.0% |" in table([{"model": "m", "router": {"as_routed": free,
                                                                              "constrained": constrained}}])
