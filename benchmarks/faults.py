"""Hardening report: `python -m benchmarks.faults`.

Runs the red team (benchmarks/hardening/red_team.py: every attack against each sandbox layer, classified
tried / rejected / contained / escaped / host-broken / host-hung; the last three must be 0) with issue 25's
classes -- hangs and protocol violations (hangs.py), orphaned workers (orphans.py), cache channels with
timing, declared types, reserved names and log amplification (channels.py) -- then the four families of
checks of benchmarks/hardening/ and prints one table:

    hostile corpus in the search    benchmarks/hardening/hostile/*.py proposed by the reflection LM in a real search
    LM faults at 10% (+35% stress)  faulty_lm on router/fallback/specialists/reflection; every fault accounted for
    kill -9 + resume                mid-evaluation, mid-reflection, mid-checkpoint (toy) + mid-evaluation (merges)
    bad inputs                      refused before any LM call, naming problem and fix; metric faults recorded

"lost work" must be 0: escapes/effects/leaks/wins (hostile), unaccounted faults (LM), lost accepted candidates
+ undercounted scored calls + archive differences (kills), cases not refused properly (inputs).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.hardening import (  # noqa: E402
    bad_inputs,
    channels,
    crash_resume,
    hangs,
    hostile_search,
    lm_faults,
    orphans,
    red_team,
)


def red_team_table(tmp: Path) -> int:
    """Print the red-team table (the first red team, then issue 25's classes); return escaped + host-broken +
    host-hung."""
    t0 = time.perf_counter()
    rows = red_team.run_red_team(tmp)
    t1 = time.perf_counter()
    hang = hangs.hang_rows()
    rows += hang + orphans.orphan_rows() + channels.cache_rows(tmp / "channels") + channels.shape_rows()
    w = max(len(r.family) for r in rows)
    print(f"{'red team: attacks against each layer':<{w}} | tried | rejected | contained | escaped | host-broken | "
          "host-hung")
    print(f"{'-' * w}-|-------|----------|-----------|---------|-------------|----------")
    for r in rows:
        c = r.counts
        print(f"{r.family:<{w}} | {r.tried:>5} | {c['rejected']:>8} | {c['contained']:>9} | {c['escaped']:>7} | "
              f"{c['host-broken']:>11} | {c.get('host-hung', 0):>9}")
    bad = sum(r.counts["escaped"] + r.counts["host-broken"] + r.counts.get("host-hung", 0) for r in rows)
    n_hang = sum(r.tried for r in hang)
    slowest = max((o.seconds - (2 if "behind" in o.name else 1) * hangs.TIMEOUT for r in hang for o in r.outcomes),
                  default=0.0)
    print(f"\nred team: {sum(r.tried for r in rows)} attacks, {bad} escaped, host-broken or host-hung "
          f"({t1 - t0:.1f}s + {time.perf_counter() - t1:.1f}s for issue 25's classes)")
    print(f"hang attacks: {n_hang}, every one ended within its deadline ({hangs.TIMEOUT:g}s; at most "
          f"{max(0.0, slowest):.2f}s past it, allowed {hangs.SLACK:g}s)" if all(
              o.outcome == "contained" for r in hang for o in r.outcomes) else
          f"hang attacks: {n_hang}, NOT all ended within their deadline")
    for r in rows:
        for n in r.notes:
            print(" -", n)
    print()
    return bad


def main() -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")   # offline: litellm's bundled cost map
    logging.getLogger("dspy.clients.lm").setLevel(logging.ERROR)
    rows, notes = [], []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="adaptive-faults-") as tmp_s:
        tmp = Path(tmp_s)
        red = red_team_table(tmp / "red-team")

        t0 = time.perf_counter()
        h = hostile_search.run_hostile_search(tmp / "hostile")
        lost = len(h.escaped) + len(h.effects) + len(h.leaks) + len(h.won) + (h.stop_reason != "budget exhausted")
        rows.append(("hostile corpus in the search", h.tried, f"{h.rejected} rejected + {h.contained} contained",
                     lost, time.perf_counter() - t0))
        notes += [f"hostile: {x}" for x in h.escaped + h.effects + h.leaks + h.won]

        for label, cfg in (("LM faults at 10%", dict(rate=0.1, num_retries=3)),
                           ("LM faults at 35%, 1 retry", dict(rate=0.35, num_retries=1))):
            t0 = time.perf_counter()
            f = lm_faults.run_with_faults(tmp / label.replace(" ", "_").replace("%", ""), **cfg)
            lost = (f.total_injected - f.accounted) + f.unattributed + f.unexplained_failures + len(f.problems)
            bounded = all(f.engine_calls[n] <= (f.num_retries + 1) * f.logical_calls[n] for n in f.engine_calls)
            lost += (not bounded) + (f.metric_calls != f.scored_calls - f.failed_rollouts)
            silent = sum(f.silent.values())
            rows.append((label, f.total_injected,
                         f"{f.survived_retried} retried + {f.survived_adapter} adapter-retried survived; "
                         f"{f.surfaced} surfaced ({f.failed_rollouts} failed rollouts, {f.router_fallbacks} router "
                         f"fallbacks, {f.failed_reflections} failed reflections); {silent} truncations parsed "
                         f"and checked downstream", lost, time.perf_counter() - t0))
            notes += [f"{label}: {p}" for p in f.problems]
            notes.append(f"{label}: engine/logical calls {f.engine_calls} / {f.logical_calls}; injected "
                         f"{dict(f.injected)}; metric calls {f.metric_calls} = scored {f.scored_calls} - failed "
                         f"rollouts {f.failed_rollouts}; degraded {f.degraded}")

        t0 = time.perf_counter()
        refs = {s: crash_resume.reference(tmp / "crash", s) for s in sorted({s for s, _ in crash_resume.POINTS})}
        ok = lost = 0
        for s, p in crash_resume.POINTS:
            o = crash_resume.crash_and_resume(tmp / "crash", s, p, refs[s])
            bad = len(o.lost_accepted) + max(0, o.undercount) + len(o.diff) + (not o.state_parseable) + (not o.killed)
            ok += bad == 0
            lost += bad
            notes.append(f"kill {s}/{p} ({o.kill}): real scored calls {o.real_calls}, spent {o.spent} + lost "
                         f"{o.lost_to_interruptions} -> undercount {max(0, o.undercount)}; accepted before kill "
                         f"{o.accepted_before}, lost {len(o.lost_accepted)}; equal to reference: {o.equal_to_reference}"
                         f"{'' if not o.diff else ' ' + str(o.diff)}")
        rows.append(("kill -9 + resume", len(crash_resume.POINTS), f"{ok} resumed losing nothing", lost,
                     time.perf_counter() - t0))

        t0 = time.perf_counter()
        outs = [bad_inputs.run_case(c, tmp / "inputs" / str(i)) for i, c in enumerate(bad_inputs.CASES)]
        m = bad_inputs.run_metric_faults(tmp / "metric")
        metric_ok = m["faults"]["metric_faults"] == m["metric"]["bad_return"] + m["metric"]["raised"]
        n_ok = sum(o.ok for o in outs) + metric_ok
        rows.append(("bad inputs", len(outs) + 1, f"{n_ok} refused before any LM call / recorded",
                     len(outs) + 1 - n_ok, time.perf_counter() - t0))
        notes += [f"input: {o.name}: {o.detail}" for o in outs if not o.ok]
        notes.append(f"metric faults: metric did {m['metric']}; run.json faults.metric_faults = "
                     f"{m['faults']['metric_faults']}")

    w = max(len(r[0]) for r in rows)
    print(f"{'check family':<{w}} | cases | contained / survived | lost work | seconds")
    print(f"{'-' * w}-|-------|----------------------|-----------|--------")
    for name, n, contained, lost, secs in rows:
        print(f"{name:<{w}} | {n:>5} | {contained} | {lost:>9} | {secs:6.1f}")
    print(f"\ntotal {time.perf_counter() - t_all:.1f}s")
    for n in notes:
        print(" -", n)
    return 0 if red == 0 and all(r[3] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
