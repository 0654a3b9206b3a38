"""A three-way routing task for the distilled-router tests, with a scripted LM router (no network).

Requests are arithmetic ("add: 3 4"), reversals ("reverse: word") or anything else (an upper-casing request,
served by the fallback). The scripted router reads the request and the slots' descriptions, as an LM router
would, and every engine call is recorded, so a test can count the LM router's calls.
"""

from __future__ import annotations

import re

import dspy

from dspy_adaptive import Library, RoutedProgram, Slot
from dspy_adaptive.testing import scripted_lm

ADD_SOURCE = '''
import re

class Adder(dspy.Module):
    def forward(self, question):
        return dspy.Prediction(answer=str(sum(int(x) for x in re.findall(r"-?\\d+", question))))
'''
REV_SOURCE = '''
class Reverser(dspy.Module):
    def forward(self, question):
        return dspy.Prediction(answer=question.split(":", 1)[1].strip()[::-1])
'''
ADD_DESC = "Arithmetic: requests to add numbers."
REV_DESC = "Reversal: requests to reverse a word."
WORDS = ["river", "stone", "cloud", "maple", "ember", "frost", "amber", "cedar", "delta", "haven", "lunar", "orbit",
         "pearl", "quartz", "raven", "solar", "tulip", "umbra", "vivid", "willow", "zephyr", "basil", "coral", "dune"]


def respond(call):
    if "slot" in call.output_fields:                      # the router
        specialists, question = call.field("specialists") or "", call.field("question") or ""
        for cue, name in (("add:", "Arithmetic"), ("reverse:", "Reversal")):
            m = re.search(rf"^(\d+): {name}", specialists, re.M)
            if m and question.startswith(cue):
                return {"slot": m.group(1)}
        return {"slot": "0"}
    question = call.field("question") or ""
    return {"answer": question.split(":", 1)[-1].strip().upper()}


def requests(n: int = 24, offset: int = 0) -> list[dspy.Example]:
    out = []
    for i in range(offset, offset + n):
        w = WORDS[i % len(WORDS)] + WORDS[(i * 7 + 3) % len(WORDS)][:2]
        out.append(dspy.Example(id=f"a{i}", question=f"add: {i} {3 * i + 1}", answer=str(4 * i + 1))
                   .with_inputs("question"))
        out.append(dspy.Example(id=f"r{i}", question=f"reverse: {w}", answer=w[::-1]).with_inputs("question"))
        out.append(dspy.Example(id=f"u{i}", question=f"upper: {w} please", answer=f"{w} please".upper())
                   .with_inputs("question"))
    return out


def library() -> Library:
    return (Library.empty(3).with_slot(1, Slot().activated(ADD_DESC, ADD_SOURCE, "fast"))
            .with_slot(2, Slot().activated(REV_DESC, REV_SOURCE, "fast")))


def program(lm=None, lib: Library | None = None) -> RoutedProgram:
    lm = lm or scripted_lm(respond, model="scripted/router")
    return RoutedProgram(dspy.Predict("question -> answer"), lib or library(), fast_lm=lm, deep_lm=lm)


def router_calls(lm) -> int:
    return sum(1 for c in lm.scripted.calls if "slot" in c.output_fields)
