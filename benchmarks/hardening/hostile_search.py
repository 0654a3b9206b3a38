"""Family 1: every source of the hostile sandbox corpus proposed INSIDE a real search.

Task: one input field named `canary` (the corpus' programs take `forward(self, canary)`), two families:
"add: i j" (the fallback fails; only a specialist can fix it) and "upper: w" (the fallback is right).
A scripted router sends "add:" requests to the slot described as Arithmetic. The scripted reflection
LM proposes the corpus in turn (interleaving rejected and contained sources so that rejected runs never
stall the loop): first as activations of slot 1 on the seed, then - after the one honest Adder is
accepted half way - as rewrites of that slot's program. After the corpus it proposes harmless Adder
variants, so the search runs to the end of its budget.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from dspy_adaptive import AdaptiveGEPA, SandboxSettings
from dspy_adaptive.testing import scripted_lm

HOSTILE_DIR = Path(__file__).resolve().parent / "hostile"
SECRET = "sk-canary-7f3a9c1e5b"
FAILURE_SCORE = -1.0
DESCRIPTION = "Arithmetic: requests asking for the addition of numbers (they start with 'add:')."

ADDER = '''import re

class Adder(dspy.Module):
    def __init__(self):
        super().__init__()

    def forward(self, canary):
        return dspy.Prediction(answer=str(sum(int(x) for x in re.findall(r"-?\\d+", canary))))
'''

#: what a run-time containment reason must say, per `# kind:` header of the corpus
KIND_REASON = {
    "timeout": r"timeout after",
    # a memory bomb is contained by whichever limit it meets first: on a loaded machine, growing to the memory
    # limit can take longer than the 1 s timeout (the cause of this family's flaky "NOT contained")
    "memory": r"memory limit|timeout after",
    "output": r"output too large",
    "predictor_limit": r"predictor",
    "exception": r"[A-Z]\w*(Error|Exception|Exit)|cannot|not available|not allowed|no attribute",
}


def corpus() -> list[dict[str, str]]:
    out = []
    for p in sorted(HOSTILE_DIR.glob("*.py")):
        src = p.read_text()
        head = dict(re.findall(r"^# (escape|expect|kind): (.+)$", src, re.M))
        out.append({"stem": p.stem, "source": src, **head})
    return out


def interleaved(items: list[dict]) -> list[dict]:
    """Rejected and contained sources alternated (rejections spend no budget; >20 in a row would stall)."""
    rej = [c for c in items if c["expect"] == "rejected"]
    con = [c for c in items if c["expect"] == "contained"]
    out, step = [], max(1, round(len(rej) / max(1, len(con))))
    while rej or con:
        out += rej[:step]
        del rej[:step]
        if con:
            out.append(con.pop(0))
    return out


def examples(n: int, offset: int = 0) -> list[dspy.Example]:
    out = []
    for i in range(offset, offset + n):
        out.append(dspy.Example(id=f"a{i}", canary=f"add: {i} {i + 7}", answer=str(2 * i + 7)).with_inputs("canary"))
        word = "".join(chr(97 + (i * 7 + j) % 26) for j in range(4))
        out.append(dspy.Example(id=f"c{i}", canary=f"upper: {word}", answer=word.upper()).with_inputs("canary"))
    return out


def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    ok = str(getattr(pred, "answer", "")).strip() == gold.answer
    return dspy.Prediction(score=float(ok), feedback="correct" if ok else "wrong answer")


def actor_respond(call):
    text = call.field("canary") or ""
    if "slot" in call.output_fields:
        m = re.search(r"^(\d+): Arithmetic", call.field("specialists") or "", re.M)
        return {"slot": m.group(1) if (m and text.startswith("add:")) else "0"}
    if text.startswith("upper:"):
        return {"answer": text.split(":", 1)[1].strip().upper()}
    return {"answer": "unknown"}


class HostileReflection:
    """Proposes the plan's sources in turn; logs (stem, mode) for each edit call."""

    def __init__(self, plan: list[dict]):
        self.plan = list(plan)
        self.log: list[tuple[str, str]] = []
        self.lm = scripted_lm(self.respond, model="scripted/hostile-reflection")

    def _next(self, mode: str) -> str:
        n = len(self.log)
        if n < len(self.plan):
            item = self.plan[n]
        else:
            item = {"stem": f"adder_variant_{n}", "source": ADDER + f"\n# variant {n}\n"}
        self.log.append((item["stem"], mode))
        return item["source"]

    def respond(self, call):
        fields = call.output_fields
        active = "(active" in (call.field("specialists") or "")
        if "action" in fields:
            return {"action": "rewrite_program", "slot": "1"} if active else {"action": "activate", "slot": "1"}
        if "profile" in fields:
            return {"description": DESCRIPTION, "program": self._next("activate"), "profile": "fast"}
        if "new_program" in fields:
            return {"new_program": self._next("rewrite")}
        return "garbage"


@dataclass
class HostileOutcome:
    tried: int
    rejected: int                  # recorded rejections by the policy, with a reason
    contained: int                 # ran and were contained (failed rollouts with a reason, or scored no win)
    escaped: list[str]             # sources that were neither: must be empty
    effects: list[str]             # effects outside the sandbox (canary, env, cwd, inputs, dspy): must be empty
    leaks: list[str]               # places the secret showed up: must be empty
    won: list[str]                 # hostile sources that entered the archive: must be empty
    stop_reason: str
    budget: dict
    per_source: dict[str, dict[str, Any]] = field(default_factory=dict)
    result: Any = None


def run_hostile_search(tmp: Path, *, budget: int | None = None, limit: int | None = None) -> HostileOutcome:
    items = interleaved(corpus())
    if limit is not None:
        items = items[:limit]
    if budget is None:   # every proposal re-runs its parent's minibatch of 3 (the paper's accounting: every
        # scoring invocation is charged); a contained source also spends a child minibatch of 3
        budget = 40 + 3 * len(items) + 4 * sum(1 for c in items if c["expect"] == "contained")
    half = (len(items) + 1) // 2
    plan = items[:half] + [{"stem": "honest_adder", "source": ADDER, "expect": "honest"}] + items[half:]
    tmp.mkdir(parents=True, exist_ok=True)
    canary = tmp / "canary.txt"
    canary.write_text("original")
    log_dir = tmp / "run"
    train, val = examples(2)[:3], examples(2, offset=100)
    train_before = [copy.deepcopy(dict(e.items())) for e in train]
    cwd_before = set(os.listdir(Path.cwd()))
    tmp_before = set(os.listdir(tmp))
    real_predict = dspy.Predict
    old_key = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = SECRET
    refl = HostileReflection(plan)
    actor = scripted_lm(actor_respond, model="scripted/hostile-actor")
    try:
        with dspy.context(lm=actor):
            opt = AdaptiveGEPA(metric, reflection_lm=refl.lm, max_metric_calls=budget, reflection_minibatch_size=3,
                               seed=0, use_merge=False, skip_perfect_score=False, failure_score=FAILURE_SCORE,
                               max_repair_attempts=0,   # each hostile source is judged once, as written
                               proposal_format="code",  # hostile source, never a spec rendered for it
                               num_threads=2, track_stats=True, progress=False, log_dir=str(log_dir),
                               sandbox=SandboxSettings(timeout=1.0, memory_mb=256, max_predictor_calls=20))
            routed = opt.compile(dspy.Predict("canary -> answer"), trainset=train, valset=val)
            routed.close()
    finally:
        if old_key is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = old_key
    res = routed.detailed_results

    effects = []
    if canary.read_text() != "original":
        effects.append("canary file changed")
    if set(os.listdir(tmp)) - tmp_before - {"run"}:
        effects.append(f"files appeared next to the canary: {set(os.listdir(tmp)) - tmp_before}")
    if set(os.listdir(Path.cwd())) != cwd_before:
        effects.append(f"host cwd changed: {set(os.listdir(Path.cwd())) ^ cwd_before}")
    if Path("/tmp/pwned").exists():
        effects.append("/tmp/pwned exists")
    if [dict(e.items()) for e in train] != train_before:
        effects.append("the trainset examples were modified")
    if dspy.Predict is not real_predict:
        effects.append("host dspy.Predict was replaced")

    leaks = []
    for name in ("run.json", "state.json", "evals.jsonl", "report.md"):
        if SECRET in (log_dir / name).read_text():
            leaks.append(name)
    if any(SECRET in p for p in refl.lm.scripted.prompts()):
        leaks.append("reflection prompts (feedback)")
    if any(SECRET in p for p in actor.scripted.prompts()):
        leaks.append("actor prompts")

    evals = [json.loads(line) for line in (log_dir / "evals.jsonl").read_text().splitlines() if line.strip()]
    by_hash: dict[str, list[dict]] = {}
    for e in evals:
        by_hash.setdefault(e["hash"], []).append(e["result"])
    reflect = [p for p in res.proposals if p["kind"] == "reflect"]
    assert len(reflect) == len(refl.log), (len(reflect), len(refl.log))  # one edit call per reflective proposal
    meta = {c["stem"]: c for c in items}
    archived_sources = [s.program_source for c in res.libraries for _, s in c.items() if s.active]
    per_source: dict[str, dict[str, Any]] = {}
    rejected = contained = 0
    escaped, won = [], []
    for (stem, mode), p in zip(refl.log, reflect):
        if stem not in meta:
            continue
        m = meta[stem]
        info: dict[str, Any] = {"mode": mode, "expect": m["expect"], "accepted": p["accepted"], "reason": p["reason"]}
        if p["accepted"] or any(m["source"].strip() in s for s in archived_sources):
            won.append(stem)
        if p["child_hash"] is None:          # rejected before running: must be the policy, with a reason
            ok = (p["failure"] == "sandbox_rejected" and "rejected by the sandbox" in p["reason"]
                  and re.search(r"line \d+: ", p["reason"]))
            info["outcome"] = "rejected" if ok else "rejected-without-policy-reason"
            rejected += bool(ok)
            if not ok:
                escaped.append(f"{stem}: {p['reason']}")
        else:                                # ran: contained at run time
            rows = [r for r in by_hash.get(p["child_hash"], []) if r["row_id"].startswith("a")]
            failed = [r for r in rows if r["error"]]
            info["errors"] = sorted({r["error"][:120] for r in failed})
            info["scores"] = [r["score"] for r in rows]
            good = bool(rows) and not p["accepted"] and p["child_sum"] <= p["parent_sum"]
            if m.get("kind"):
                pat = KIND_REASON[m["kind"]]
                good = good and len(failed) == len(rows) and all(
                    r["score"] == FAILURE_SCORE and re.search(pat, r["error"]) for r in failed)
            info["outcome"] = "contained" if good else "NOT contained"
            contained += good
            if not good:
                escaped.append(f"{stem}: {info}")
        per_source[stem] = info
    tried = sum(1 for s, _ in refl.log if s in meta)
    if tried != len(items):
        escaped.append(f"only {tried} of {len(items)} corpus sources were proposed before the budget ran out")
    return HostileOutcome(tried=tried, rejected=rejected, contained=contained, escaped=escaped, effects=effects,
                          leaks=leaks, won=won, stop_reason=res.stop_reason, budget=res.budget,
                          per_source=per_source, result=res)
