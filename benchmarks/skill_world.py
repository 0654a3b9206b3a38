"""A scripted world where search has something to find and branches to merge (`--scripted skills`).

`ScriptedWorld` (dspy_adaptive.testing) stops improving once its two specialists exist. Here a
specialist's quality is a *skill level* written in its instructions ("(skill N)", N = 1..8): the
scripted actor answers an AIME or HotpotQA request correctly iff its specialist's skill exceeds the
request's fixed difficulty (sha1 of the request mod 8). Reflection reads only the traces: it works on
the family of the first request that failed in its minibatch, activating that family's specialist in
the lowest free slot (so branches put mathematics and retrieval in different slots, as the paper's
parents #55 and #59 did) or rewriting its program one skill level up. Different branches improve
different specialists, so merges that combine them have something to combine: the run shows merge
checks, passes, footprint alignment and Table 10 classes at a rate comparable to the paper's run.
Scores mean nothing beyond that; every responder reads only the prompt.
"""

from __future__ import annotations

import hashlib
import re

from dspy_adaptive.program.library import DEFAULT_ROUTER
from dspy_adaptive.tasks import INPUT_FIELD
from dspy_adaptive.testing import MATH_DESC, QA_DESC, ScriptedWorld, looks_math, looks_question

MAX_SKILL = 16
_SKILL = re.compile(r"\(skill (\d+), take (\d+)\)")
SLIP = 5          # a program version gets one request in SLIP wrong that its skill would solve

_MATH = '''PROFILE = "deep"


class MathSolver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.solve = dspy.ChainOfThought(
            "request -> response",
            instructions="Solve the problem; end with the final integer answer. (skill {n}, take {t})")

    def forward(self, request):
        return dspy.Prediction(response=self.solve(request=request).response)
'''
_QA = '''PROFILE = "fast"


class Researcher(dspy.Module):
    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict(
            "context, request -> response",
            instructions="Answer the question from the context in a short phrase. (skill {n}, take {t})")

    def forward(self, request):
        passages = search(query=request, k=3)
        return dspy.Prediction(response=self.answer(context="\\n".join(passages), request=request).response)
'''
FAMILIES = {"math": (MATH_DESC, _MATH, "deep", looks_math), "qa": (QA_DESC, _QA, "fast", looks_question)}


def difficulty(request: str) -> int:
    return int(hashlib.sha1(request.strip().encode()).hexdigest()[:8], 16) % MAX_SKILL


def slipped(take: str, request: str) -> bool:
    return int(hashlib.sha1(f"{take}|{request.strip()}".encode()).hexdigest()[:8], 16) % SLIP == 0


def family_of(request: str) -> str | None:
    return next((f for f, (*_, test) in FAMILIES.items() if test(request)), None)


def quoted_input(block: str) -> str | None:
    """The request of one record: quoted on its field's line ("  request: | text") or, when it is long or
    has several lines, on the lines below it, each "    | text" (dspy_adaptive.reflection.traces)."""
    lines = block.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^  " + INPUT_FIELD + r":(?: \| (.*))?$", line)
        if not m:
            continue
        if m.group(1) is not None:
            return m.group(1)
        body = []
        for nxt in lines[i + 1:]:
            q = re.match(r"^    \|(?: (.*))?$", nxt)
            if not q:
                break
            body.append(q.group(1) or "")
        return "\n".join(body)
    return None


def failing_requests(traces: str) -> list[tuple[str, str]]:
    """(family, request) of every math or factual request in the minibatch records that did not score 1."""
    out = []
    for block in traces.split("### Request")[1:]:
        req = quoted_input(block)
        score = re.search(r"^Score: (\S+)", block, re.M)
        if req and score and score.group(1) != "1" and (fam := family_of(req)):
            out.append((fam, req))
    return out


def first_failing_family(traces: str) -> str | None:
    """The family of the first request in the minibatch records that did not score 1."""
    failing = failing_requests(traces)
    return failing[0][0] if failing else None


def _take(traces: str) -> int:
    return int(hashlib.sha1(traces.encode()).hexdigest()[:6], 16) % 1000


class SkillWorld(ScriptedWorld):
    def actor(self, call):
        if "slot" in call.output_fields:
            return super().actor(call)                                          # the same router
        request = (call.field(INPUT_FIELD) or "").strip()
        kind, answer = self.answers.get(request, (None, None))
        m = _SKILL.search(call.instructions or "")
        if m and kind in ("aime", "hotpotqa"):
            solved = int(m.group(1)) > difficulty(request) and not slipped(m.group(2), request)
            if kind == "aime":
                return {"reasoning": "Scripted reasoning.", "response": f"The answer is {answer if solved else -1}."}
            return {"response": answer if solved else "unknown"}
        return super().actor(call)

    def reflection(self, call):
        fields = call.output_fields
        specialists = call.field("specialists") or ""
        traces = call.field("traces") or ""
        free = re.findall(r"^(\d+) \(free\)", specialists, re.M)
        slots = {f: m.group(1) for f, (desc, *_) in FAMILIES.items()
                 if (m := re.search(rf"^(\d+) \(active[^)]*\): {re.escape(desc)}", specialists, re.M))}
        fam = first_failing_family(traces)
        if "action" in fields:
            if fam is None:
                return {"action": "rewrite_router", "slot": "0"}
            if fam in slots:
                return {"action": "rewrite_program", "slot": slots[fam]}
            return {"action": "activate", "slot": free[0]} if free else {"action": "rewrite_router", "slot": "0"}
        if "profile" in fields:                                                 # activate: skill 1
            desc, src, profile, _ = FAMILIES[fam or "math"]
            return {"description": desc, "program": src.format(n=1, t=_take(traces)), "profile": profile}
        if "new_program" in fields:            # just skilled enough for the easiest failing request of its family
            program = call.field("program") or ""
            current = int(m.group(1)) if (m := _SKILL.search(program)) else 1
            take = _take(traces)
            target = "math" if "Mathematics" in (call.field("description") or "") else "qa"
            needed = [difficulty(r) + 1 for f, r in failing_requests(traces) if f == target]
            skill = min(MAX_SKILL, max(current + 1, min(needed))) if needed else current + 1
            return {"new_program": FAMILIES[target][1].format(n=min(MAX_SKILL, skill), t=take)}
        if "new_router" in fields:
            return {"new_router": DEFAULT_ROUTER}
        return super().reflection(call)


__all__ = ["SkillWorld", "difficulty", "first_failing_family"]
