"""A two-family toy task with scripted LMs, shared by the search tests.

Requests are "add: 2 3" (family arith, answer "5") or "upper: abc" (family caps, answer "ABC").
The fallback (one Predict) answers caps correctly and arith wrongly. A scripted reflection LM
activates a Python specialist for arith; a scripted router sends "add:" requests to the slot whose
description mentions addition. Every responder depends only on the prompt, never on call order.
"""

from __future__ import annotations

import hashlib
import re

import dspy

from dspy_adaptive.testing import scripted_lm

ADD_SOURCE = '''
class Adder(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, question):
        numbers = [int(x) for x in re.findall(r"-?\\d+", question)]
        return dspy.Prediction(answer=str(sum(numbers)))
'''.replace("class Adder", "import re\n\nclass Adder")

WRONG_SOURCE = '''
class Wrong(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, question):
        return dspy.Prediction(answer="nope")
'''

BAD_SOURCE = '''
import os

class Reader(dspy.Module):
    def forward(self, question):
        return dspy.Prediction(answer=os.environ.get("OPENAI_API_KEY", ""))
'''

ARITH_DESCRIPTION = "Arithmetic: requests asking for the addition of numbers (they start with 'add:')."


def make_examples(n_each: int, offset: int = 0) -> list[dspy.Example]:
    out = []
    for i in range(offset, offset + n_each):
        out.append(dspy.Example(id=f"a{i}", question=f"add: {i} {i + 7}", answer=str(2 * i + 7),
                                family="arith-label", secret=f"HIDDEN-LABEL-a{i}").with_inputs("question"))
        word = "".join(chr(97 + (i * 7 + j) % 26) for j in range(4))
        out.append(dspy.Example(id=f"c{i}", question=f"upper: {word}", answer=word.upper(),
                                family="caps-label", secret=f"HIDDEN-LABEL-c{i}").with_inputs("question"))
    return out


def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    ok = str(pred.answer).strip() == gold.answer
    return dspy.Prediction(score=float(ok), feedback="correct" if ok else
                           f"wrong: expected a different answer than {pred.answer!r}")


def actor_respond(call):
    """Router + fallback."""
    if "slot" in call.output_fields:  # the router
        specialists = call.field("specialists") or ""
        question = call.field("question") or ""
        m = re.search(r"^(\d+): Arithmetic", specialists, re.M)
        return {"slot": m.group(1) if (m and question.startswith("add:")) else "0"}
    question = call.field("question") or ""
    if question.startswith("upper:"):
        return {"answer": question.split(":", 1)[1].strip().upper()}
    return {"answer": "unknown"}


def actor_lm(latency: float = 0.0):
    return scripted_lm(actor_respond, latency=latency, model="scripted/actor")


def reflection_lm(program_source: str = ADD_SOURCE, action: str = "activate", slot: str = "1",
                  description: str = ARITH_DESCRIPTION, profile: str = "fast", fail_after: int | None = None,
                  vary: bool = False):
    """A reflection LM that always proposes `action` on `slot` with `program_source` (with `vary`, each
    proposal's source carries a distinct comment, so every child is a new candidate)."""
    state = {"n": 0}
    base_source = program_source

    def respond(call):
        state["n"] += 1
        if fail_after is not None and state["n"] > fail_after:
            raise KeyboardInterrupt("simulated crash")
        fields = call.output_fields
        variant = hashlib.sha256(call.prompt.encode()).hexdigest()[:8]   # a function of the prompt only
        program_source = base_source + (f"\n# variant {variant}\n" if vary else "")
        if "action" in fields:
            return {"action": action, "slot": slot}
        if "profile" in fields:
            return {"description": description, "program": f"```python\n{program_source}\n```", "profile": profile}
        if "new_program" in fields:
            return {"new_program": program_source}
        if "new_description" in fields:
            return {"new_description": description}
        if "new_router" in fields:
            return {"new_router": "Route additions to the arithmetic slot."}
        return "garbage"

    return scripted_lm(respond, model="scripted/reflection")


# -- three families for merge tests: add (specialist needed), reverse (specialist needed), caps (fallback) ----

REV_SOURCE = '''
class Reverser(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, question):
        word = question.split(":", 1)[1].strip()
        return dspy.Prediction(answer=word[::-1])
'''

REV_DESCRIPTION = "Reversal: requests asking to reverse a word (they start with 'reverse:')."


def make_examples3(n_each: int, offset: int = 0) -> list[dspy.Example]:
    out = []
    for i in range(offset, offset + n_each):
        word = "".join(chr(97 + (i * 5 + j) % 26) for j in range(5))
        out.append(dspy.Example(id=f"a{i}", question=f"add: {i} {i + 3}", answer=str(2 * i + 3))
                   .with_inputs("question"))
        out.append(dspy.Example(id=f"r{i}", question=f"reverse: {word}", answer=word[::-1]).with_inputs("question"))
        # two caps words the scripted router misroutes ("add"/"rev" inside): each specialist hurts one row, so
        # the seed stays on the Pareto front until both branches exist
        caps = {offset: "ladder", offset + 1: "revel"}.get(i, word)
        out.append(dspy.Example(id=f"c{i}", question=f"upper: {caps}", answer=caps.upper()).with_inputs("question"))
    return out


def router3_respond(call):
    if "slot" in call.output_fields:
        specialists = call.field("specialists") or ""
        question = call.field("question") or ""
        for word, role in (("add", "Arithmetic"), ("rev", "Reversal")):
            m = re.search(rf"^(\d+): {role}", specialists, re.M)
            if m and word in question:
                return {"slot": m.group(1)}
        return {"slot": "0"}
    return actor_respond(call)


def branching_reflection_lm():
    """Activates ONE specialist for whichever family fails in the minibatch (add before reverse), in
    the lowest free slot; on a library that already has a specialist it proposes nothing useful, so a
    library with both specialists can only come from a merge."""

    def respond(call):
        fields = call.output_fields
        traces = call.field("traces") or ""
        failing_add = re.search(r"add: .*?\n(?:.*\n)*?Score: 0", traces) is not None
        specialists = call.field("specialists") or ""
        free = re.findall(r"^(\d+) \(free\)", specialists, re.M)
        has_active = "(active" in specialists
        if "action" in fields:
            if has_active:
                return {"action": "rewrite_router", "slot": "0"}
            return {"action": "activate", "slot": free[0] if free else "1"}
        if "profile" in fields:
            want_add = "add:" in traces and failing_add and "reverse:" not in traces
            source, desc = (ADD_SOURCE, ARITH_DESCRIPTION) if want_add else (REV_SOURCE, REV_DESCRIPTION)
            return {"description": desc, "program": source, "profile": "fast"}
        if "new_router" in fields:
            return {"new_router": DEFAULT_ROUTER_TEXT}
        return "garbage"

    return scripted_lm(respond, model="scripted/reflection-branching")


from dspy_adaptive.program.library import DEFAULT_ROUTER as DEFAULT_ROUTER_TEXT  # noqa: E402
