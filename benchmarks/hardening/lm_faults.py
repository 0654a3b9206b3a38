"""Family 2: LM fault injection at a given rate on every role, with an exact fault ledger.

Roles and LMs: router + "fast" specialists on `fast_lm`, the fallback on `deep_lm`, reflection on
`reflection_lm` - each a `faulty_lm` over a scripted LM with its own seed. The specialist the scripted
reflection writes calls a predictor through the sandbox bridge, so specialist calls are exercised too.

The ledger (a DSPy callback plus a wrapper on each fault engine's draw) attributes every injected fault
to the predictor call (dspy.Predict) during which it was drawn, and classifies it:

  survived: retried      a transient fault (exception / rate_limit / timeout) after which DSPy's LM layer
                         retried (bounded by num_retries) and the predictor call succeeded
  survived: adapter      a bad completion (empty / truncated / wrong_format) that failed ChatAdapter's parse;
                         the JSON-adapter retry succeeded and the predictor call succeeded
  surfaced               the predictor call failed; it must show in the run record as exactly one of
                         a failed rollout (router LM error, fallback, specialist), a router answer resolved
                         to the fallback with the reason recorded ("unparseable router output"), or, for
                         reflection, a failure its proposal records (the proposal's own when the LM call
                         raised, else a rejected attempt, possibly repaired)
  silent                 a bad completion that parsed anyway (no parse failure seen): must be 0
  unattributed           drawn outside any predictor call: must be 0
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy
import dspy.clients.execution as dspy_execution
from dspy.utils.callback import BaseCallback

from dspy_adaptive import AdaptiveGEPA, SandboxSettings
from dspy_adaptive.reflection.propose import Reflector
from dspy_adaptive.schema import REFLECTION_ERRORS
from dspy_adaptive.testing import scripted_lm
from dspy_adaptive.testing.lm_faults import faulty_lm
from tests.core import toy

RAISE_KINDS = ("exception", "rate_limit", "timeout")
OUTPUT_KINDS = ("empty", "truncated", "wrong_format")

CHECKED_ADDER = '''import re

class Adder(dspy.Module):
    def __init__(self):
        super().__init__()
        self.read = dspy.Predict("question -> answer")

    def forward(self, question):
        self.read(question=question)
        numbers = [int(x) for x in re.findall(r"-?\\d+", question)]
        return dspy.Prediction(answer=str(sum(numbers)))
'''


def reflection_respond(call):
    """Activate the (predictor-calling) Adder on a library without a specialist; otherwise rewrite its
    program (a distinct variant per prompt, so children are new candidates)."""
    import hashlib
    fields = call.output_fields
    variant = hashlib.sha256(call.prompt.encode()).hexdigest()[:8]
    source = CHECKED_ADDER + f"\n# variant {variant}\n"
    active = "(active" in (call.field("specialists") or "")
    if "action" in fields:
        return {"action": "rewrite_program", "slot": "1"} if active else {"action": "activate", "slot": "1"}
    if "profile" in fields:
        return {"description": toy.ARITH_DESCRIPTION, "program": f"```python\n{source}\n```", "profile": "fast"}
    if "new_program" in fields:
        return {"new_program": source}
    return "garbage"


@dataclass
class PredictorCall:
    role: str | None
    faults: list[tuple[str, str]] = field(default_factory=list)   # (lm name, kind)
    lm_calls: int = 0                 # logical LM calls made inside this predictor call (2 = JSON-adapter retry)
    episode: int | None = None        # the reflection proposal it belongs to (reflection role only)
    ok: bool | None = None
    error: str | None = None


class FaultLedger(BaseCallback):
    def __init__(self, lms: dict[str, dspy.LM]):
        self.lms = lms
        self.names = {id(lm): name for name, lm in lms.items()}
        self._tls = threading.local()
        self._lock = threading.Lock()
        self.calls: list[PredictorCall] = []
        self.by_id: dict[str, PredictorCall] = {}
        self.unattributed: list[tuple[str, str]] = []
        self.logical: Counter[str] = Counter()
        self.failed_logical: Counter[str] = Counter()
        self._lm_ids: dict[str, str] = {}
        for name, lm in lms.items():
            self._wrap(name, lm.faults)

    def _stack(self) -> list[PredictorCall]:
        if not hasattr(self._tls, "stack"):
            self._tls.stack = []
        return self._tls.stack

    def _wrap(self, name: str, engine: Any) -> None:
        draw = engine._draw

        def counted_draw(key: str):
            kind = draw(key)
            if kind is not None:
                stack = self._stack()
                if stack:
                    stack[-1].faults.append((name, kind))
                else:
                    with self._lock:
                        self.unattributed.append((name, kind))
            return kind

        engine._draw = counted_draw

    @staticmethod
    def _role() -> str | None:
        tracker = dspy.settings.get("usage_tracker")
        return getattr(tracker, "role_name", None)

    def on_module_start(self, call_id, instance, inputs):
        if isinstance(instance, dspy.Predict):
            rec = PredictorCall(role=self._role(), episode=getattr(self._tls, "episode", None))
            self._stack().append(rec)
            with self._lock:
                self.calls.append(rec)
                self.by_id[call_id] = rec

    def on_module_end(self, call_id, outputs, exception=None):
        with self._lock:
            rec = self.by_id.pop(call_id, None)
        if rec is not None:
            stack = self._stack()
            if stack and stack[-1] is rec:
                stack.pop()
            rec.ok = exception is None
            rec.error = None if exception is None else type(exception).__name__

    def on_lm_start(self, call_id, instance, inputs):
        name = self.names.get(id(instance))
        if name:
            with self._lock:
                self.logical[name] += 1
                self._lm_ids[call_id] = name
            if self._stack():
                self._stack()[-1].lm_calls += 1

    def on_lm_end(self, call_id, outputs, exception=None):
        with self._lock:
            name = self._lm_ids.pop(call_id, None)
            if name and exception is not None:
                self.failed_logical[name] += 1


@dataclass
class FaultOutcome:
    rate: float
    num_retries: int
    injected: Counter
    injected_by_lm: dict[str, dict[str, int]]
    engine_calls: dict[str, int]
    logical_calls: dict[str, int]
    failed_logical_calls: dict[str, int]
    survived_retried: int
    survived_adapter: int
    surfaced: int                           # faults inside predictor calls that failed
    silent: dict[str, int]                  # bad completions that parsed anyway, by kind
    degraded: dict[str, int]                # ... and the downstream check each of those met
    unattributed: int
    surfaced_by_role: dict[str, int]        # failed predictor calls per role
    records_by_role: dict[str, int]         # what the run record shows per role (must be equal)
    metric_calls: int
    scored_calls: int
    failed_rollouts: int
    failed_reflections: int
    router_fallbacks: int
    max_backoff: float
    unexplained_failures: int               # predictor calls that failed with no injected fault
    stop_reason: str
    seconds: float
    result: Any = None
    problems: list[str] = field(default_factory=list)

    @property
    def total_injected(self) -> int:
        return sum(self.injected.values())

    @property
    def accounted(self) -> int:
        return self.survived_retried + self.survived_adapter + self.surfaced + sum(self.silent.values())


def run_with_faults(log_dir: Path, *, rate: float = 0.1, num_retries: int = 3, budget: int = 200,
                    seed: int = 0) -> FaultOutcome:
    t0 = time.perf_counter()
    lms = {"fast": faulty_lm(toy.actor_lm(), rate=rate, seed=seed + 1, num_retries=num_retries),
           "deep": faulty_lm(toy.actor_lm(), rate=rate, seed=seed + 2, num_retries=num_retries),
           "reflection": faulty_lm(scripted_lm(reflection_respond, model="scripted/reflection"), rate=rate,
                                   seed=seed + 3, num_retries=num_retries)}
    ledger = FaultLedger(lms)
    metric_calls = Counter()

    def counting_metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        metric_calls["n"] += 1
        return toy.metric(gold, pred, trace, pred_name, pred_trace)

    problems: list[str] = []
    delays: list[float] = []
    real_delay = dspy_execution._delay

    def quick_delay(exc, attempt):          # keep DSPy's backoff bounded AND fast: record what it asked for
        delays.append(real_delay(exc, attempt))
        return 0.001

    episodes: list[Any] = []
    real_propose = Reflector.propose

    def propose(self, *args, **kwargs):      # tag reflection predictor calls with their proposal
        ledger._tls.episode = len(episodes)
        try:
            edit = real_propose(self, *args, **kwargs)
        finally:
            ledger._tls.episode = None
        episodes.append(edit)
        return edit

    dspy_execution._delay = quick_delay
    Reflector.propose = propose
    try:
        with dspy.context(lm=None, callbacks=[ledger]):
            opt = AdaptiveGEPA(counting_metric, reflection_lm=lms["reflection"], fast_lm=lms["fast"],
                               deep_lm=lms["deep"], max_metric_calls=budget, reflection_minibatch_size=4, seed=seed,
                               use_merge=False, skip_perfect_score=False, route_memo=False, track_stats=True,
                               progress=False, log_dir=str(log_dir),
                               sandbox=SandboxSettings(timeout=5.0, memory_mb=256))
            routed = opt.compile(dspy.Predict("question -> answer"), trainset=toy.make_examples(4),
                                 valset=toy.make_examples(4, offset=100))
            routed.close()
    finally:
        dspy_execution._delay = real_delay
        Reflector.propose = real_propose
    res = routed.detailed_results
    evals = [json.loads(line)["result"] for line in (log_dir / "evals.jsonl").read_text().splitlines() if line]

    injected = Counter()
    for lm in lms.values():
        injected.update(lm.faults.counts)
    survived_retried = survived_adapter = surfaced = 0
    silent: Counter[str] = Counter()
    degraded: Counter[str] = Counter()
    surfaced_by_role: Counter[str] = Counter()
    failed_reflection_calls: Counter[int] = Counter()
    unexplained = 0
    for rec in ledger.calls:
        n_raise = sum(1 for _, k in rec.faults if k in RAISE_KINDS)
        outs = [k for _, k in rec.faults if k in OUTPUT_KINDS]
        if rec.ok:
            survived_retried += n_raise
            caught = min(len(outs), max(0, rec.lm_calls - 1))   # each caught bad completion cost one JSON retry
            survived_adapter += caught
            for k in outs[caught:]:
                silent[k] += 1
                if rec.role == "reflection":
                    edit = episodes[rec.episode]
                    degraded["reflection -> recorded rejection" if edit.rejected else "reflection -> child gated"] += 1
                else:
                    degraded[f"{rec.role} -> output scored by the metric"] += 1
        else:
            surfaced += n_raise + len(outs)
            surfaced_by_role[rec.role or "?"] += 1
            if not rec.faults:
                unexplained += 1
            if rec.role == "reflection":
                failed_reflection_calls[rec.episode] += 1

    # what the run record shows, per role
    router_fallbacks = sum(1 for r in evals if "unparseable router output" in (r["fallback_reason"] or ""))
    failed = [r for r in evals if r["error"]]
    records_by_role = {
        "router": router_fallbacks + sum(1 for r in failed if r["executed"] is None),
        "fallback": sum(1 for r in failed if r["executed"] == 0),
        "specialist": sum(1 for r in failed if (r["executed"] or 0) >= 1),
        "reflection": res.faults["failed_reflections"],
    }
    # a reflection call that failed is recorded by its proposal: as the proposal's failure (the LM call raised:
    # selection_failed / edit_failed), or as a rejected attempt (an answer that did not parse), which a repair
    # may have followed -- so per proposal, its failed calls never outnumber the failures it records
    for episode, n in failed_reflection_calls.items():
        edit = episodes[episode]
        recorded = sum(1 for a in edit.attempts if a.failure is not None) + int(edit.failure in REFLECTION_ERRORS)
        if n > recorded:
            problems.append(f"{n} failed reflection calls but their proposal records {recorded}: {edit}")
    for role_name in (set(records_by_role) | set(surfaced_by_role)) - {"reflection"}:
        if records_by_role.get(role_name, 0) != surfaced_by_role.get(role_name, 0):
            problems.append(f"{role_name}: {surfaced_by_role.get(role_name, 0)} failed predictor calls but the run "
                            f"record shows {records_by_role.get(role_name, 0)}")
    if res.faults["failed_rollouts"] != len(failed):
        problems.append(f"run.json faults.failed_rollouts={res.faults['failed_rollouts']} but "
                        f"{len(failed)} failed rows")
    if any(p["accepted"] and p["kind"] == "reflect" and p["child_sum"] <= p["parent_sum"] for p in res.proposals):
        problems.append("a child was accepted without beating its parent")
    return FaultOutcome(
        rate=rate, num_retries=num_retries, injected=injected,
        injected_by_lm={n: dict(lm.faults.counts) for n, lm in lms.items()},
        engine_calls={n: lm.faults.calls for n, lm in lms.items()}, logical_calls=dict(ledger.logical),
        failed_logical_calls=dict(ledger.failed_logical), survived_retried=survived_retried,
        survived_adapter=survived_adapter, surfaced=surfaced, silent=dict(silent), degraded=dict(degraded),
        unattributed=len(ledger.unattributed), surfaced_by_role=dict(surfaced_by_role),
        records_by_role=records_by_role, metric_calls=metric_calls["n"], scored_calls=res.budget["spent"],
        failed_rollouts=res.faults["failed_rollouts"], failed_reflections=res.faults["failed_reflections"],
        router_fallbacks=router_fallbacks, max_backoff=max(delays, default=0.0), unexplained_failures=unexplained,
        stop_reason=res.stop_reason, seconds=time.perf_counter() - t0, result=res, problems=problems)
