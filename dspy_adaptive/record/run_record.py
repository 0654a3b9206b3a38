"""The run record: `detailed_results` and the files a finished run leaves in log_dir.

Files: `run.json` (everything below, machine-readable), `report.md` (for people), and
`learning_curve.png` (best validation mean vs scored calls). `load_run(log_dir)` reads a run back.
Field names follow dspy.GEPA's `DspyGEPAResult` where the meaning is the same. `sandbox` is the
sandbox's measured isolation (`SandboxPool.isolation_report().to_dict()`): which layers held here.

report.md shows LM-written text (router, descriptions, programs, fault names) only through
`dspy_adaptive.escaping`: code in fences longer than any backtick run inside, hidden characters
(bidirectional controls, zero-width characters, ...) written visibly, no live HTML or Markdown.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from dspy_adaptive.escaping import md_cell, md_code, md_fence, md_text
from dspy_adaptive.program.library import Library
from dspy_adaptive.record.merge_census import budget_accounting, merge_census
from dspy_adaptive.schema import ACTIONS, REFLECTION_ERRORS, ProposalRecord, RowResult, clip, slot_label
from dspy_adaptive.search.archive import Archive, Candidate


@dataclass(frozen=True)
class AdaptiveGEPAResult:
    candidates: list[Library]
    parents: list[list[int]]
    origins: list[str]
    val_aggregate_scores: list[float]
    val_subscores: list[dict[str, float]]
    per_val_instance_best_candidates: dict[str, list[int]]
    discovery_eval_counts: list[int]
    executed: list[dict[str, int | None]]       # per candidate: validation row -> slot that ran (footprints)
    selected: list[dict[str, int | None]]       # per candidate: validation row -> router selection
    proposals: list[dict[str, Any]]
    action_counts: dict[str, dict[str, int]]    # paper Table 5: proposed / accepted per action
    budget: dict[str, Any]
    usage: dict[str, dict[str, float]]
    best_idx: int
    seed: int
    log_dir: str | None = None
    merge_events: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = ""
    schedule: list[dict[str, Any]] = field(default_factory=list)   # sequential steps (perf analysis)
    faults: dict[str, Any] = field(default_factory=dict)            # failures the search absorbed
    sandbox: dict[str, Any] = field(default_factory=dict)           # IsolationReport.to_dict() of the run's pool
    merge_census: dict[str, Any] = field(default_factory=dict)      # merge.census: checks, passes, Table 10
    reproducibility: str = ""                                       # whether the seed fixes the run, and why
    endpoints: dict[str, dict[str, int]] = field(default_factory=dict)   # pooled LMs: calls/tokens per endpoint
    distilled_router: dict[str, Any] = field(default_factory=dict)  # distill.report.compile_record, when asked for

    @property
    def best_candidate(self) -> Library:
        return self.candidates[self.best_idx]

    @property
    def total_metric_calls(self) -> int:
        return self.budget["spent"]

    @property
    def num_full_val_evals(self) -> int:
        return len(self.candidates)

    @classmethod
    def from_state(cls, state: Mapping[str, Any], *, row_results: Iterable[RowResult] = (),
                   schedule: Sequence[dict[str, Any]] = (), log_dir: str | None = None,
                   sandbox: Mapping[str, Any] | None = None) -> "AdaptiveGEPAResult":
        """The result of a search from its saved state (`SearchEngine.state_dict()`, as in `state.json`).

        Args:
            state: the search state.
            row_results: every scored call the run made (for the fault summary).
            schedule: the run's recorded sequential steps (perf analysis).
            log_dir: where the run's record lives, if anywhere.
            sandbox: the sandbox's isolation report (`IsolationReport.to_dict()`); it describes the host the
                run finished on, so it is not part of the search state.
        """
        arch = Archive(tuple(state["val_ids"]), [Candidate.from_dict(c) for c in state["archive"]])
        records = [ProposalRecord.from_dict(p) for p in state["proposals"]]
        proposals = [p.to_dict() for p in records]
        by_kind = dict(state["budget"])
        spent = sum(by_kind.values())
        allowed = max(state["max_calls"], state.get("max_calls_allowed") or 0)   # the largest any session gave
        return cls(
            candidates=[c.library for c in arch.candidates],
            parents=[list(c.parents) for c in arch.candidates],
            origins=[c.origin for c in arch.candidates],
            val_aggregate_scores=[c.val_mean for c in arch.candidates],
            val_subscores=[dict(c.scores) for c in arch.candidates],
            per_val_instance_best_candidates={k: sorted(v) for k, v in arch.pareto_fronts().items()},
            discovery_eval_counts=[c.discovered_at for c in arch.candidates],
            executed=[dict(c.executed) for c in arch.candidates],
            selected=[dict(c.selected) for c in arch.candidates],
            proposals=proposals,
            action_counts=action_counts(proposals),
            budget={"max": allowed, "spent": spent, "by_kind": by_kind, "this_session": state["max_calls"],
                    "overshoot": max(0, spent - allowed), "lost_to_interruptions": state["lost_calls"]},
            usage=dict(state["usage"]),
            best_idx=arch.best_index(),
            seed=state["seed"],
            log_dir=log_dir,
            merge_events=[p["details"] for p in proposals if p["kind"] == "merge"],
            stop_reason=state.get("stop_reason", ""),
            schedule=list(schedule),
            faults=fault_summary(records, row_results, state["lost_calls"]),
            sandbox=dict(sandbox or {}),
            merge_census=merge_census(proposals),
            reproducibility=state.get("reproducibility", ""),
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["candidates"] = [c.to_dict() for c in self.candidates]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AdaptiveGEPAResult":
        d = dict(d)
        d["candidates"] = [Library.from_dict(c) for c in d["candidates"]]
        return cls(**d)


def sandbox_record(pool: Any) -> dict[str, Any]:
    """The run record's `sandbox` entry: the pool's measured isolation (which layers held, and why any did
    not); if it cannot be measured, why not."""
    import warnings
    try:
        with warnings.catch_warnings():       # the pool has already warned once about missing layers
            warnings.simplefilter("ignore")
            return pool.isolation_report().to_dict()
    except Exception as e:  # noqa: BLE001 - the record says so instead of failing a finished search
        return {"error": f"{type(e).__name__}: {str(e)[:500]}"}


def fault_summary(proposals: Iterable[ProposalRecord], row_results: Iterable[RowResult],
                  lost_calls: int = 0) -> dict[str, Any]:
    """What went wrong and was absorbed: failed rollouts (scored failure_score, metric not called) by error
    kind, metric faults, router answers that were not a slot number, reflections whose LM call failed, and
    calls lost to interruptions. Counted from typed fields only."""
    results = list(row_results)
    by_kind = Counter(r.error_kind or "error" for r in results if r.error)
    notes = Counter(clip(r.metric_note, 300) for r in results if r.metric_note)
    errors = Counter(clip(r.error.strip().splitlines()[0] if r.error.strip() else r.error, 300)
                     for r in results if r.error)
    return {"failed_rollouts": sum(by_kind.values()), "failed_rollouts_by_type": dict(by_kind),
            "failed_rollout_errors": [[error, n] for error, n in errors.most_common(3)],
            "metric_faults": sum(1 for r in results if r.metric_note),
            "metric_fault_notes": [[note, n] for note, n in notes.most_common(3)],
            "router_fallbacks": sum(1 for r in results if r.router_unparsed),
            "failed_reflections": sum(1 for p in proposals if p.failure in REFLECTION_ERRORS),
            "lost_to_interruptions": lost_calls}


def action_counts(proposals: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    proposed, accepted = Counter(), Counter()
    for p in proposals:
        if p["kind"] == "skip" or (p["kind"] == "stale" and p["action"] is None):   # no edit was proposed
            continue
        name = "merge" if p["kind"] == "merge" else (p["action"] or "malformed")
        proposed[name] += 1
        accepted[name] += int(p["accepted"])
    names = list(ACTIONS) + sorted(set(proposed) - set(ACTIONS))
    return {a: {"proposed": proposed[a], "accepted": accepted[a]} for a in names if proposed[a] or a in ACTIONS}


#: How people read each FailureKind in the outcome table.
FAILURE_WORDS = {
    "selection_failed": "the action-selection LM call raised", "unknown_action": "not a known action",
    "invalid_target": "impossible target slot", "edit_failed": "the edit's LM call raised",
    "bad_output": "unusable answer (empty or invalid field)", "unparseable": "answer did not parse",
    "truncated": "answer cut off at the token limit", "sandbox_rejected": "program refused by the sandbox",
    "no_change": "changed nothing", "gate": "did not beat its parent on the minibatch",
    "merge_gate": "merge scored below the stronger parent", "merge_copy": "merge identical to a parent",
    "perfect": "parent already perfect on the minibatch", "stale": "parent left the front (concurrency)",
}


def outcome_of(p: Mapping[str, Any]) -> str:
    """One proposal's outcome: accepted, failed the gate, rejected before the gate, or skipped."""
    if p.get("accepted"):
        return "accepted"
    failure = p.get("failure")
    if failure in ("gate", "merge_gate"):
        return "failed the gate"
    if failure in ("perfect", "stale", "merge_copy") or p.get("kind") == "skip":
        return "skipped"
    return "rejected before the gate"


def proposal_outcomes(proposals: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Proposals counted by (outcome, failure kind), each with one sample reason and one sample of the
    rejected answer (the last attempt's, or the refused source), plus how many were repaired."""
    groups: dict[tuple[str, str | None], dict[str, Any]] = {}
    order = ("accepted", "failed the gate", "rejected before the gate", "skipped")
    for p in proposals:
        key = (outcome_of(p), None if p.get("accepted") else p.get("failure"))
        g = groups.setdefault(key, {"outcome": key[0], "failure": key[1], "count": 0, "repaired": 0,
                                    "sample_reason": None, "sample_answer": None})
        g["count"] += 1
        details = p.get("details") or {}
        g["repaired"] += int(bool(details.get("repairs")))
        if g["sample_reason"] is None and p.get("reason"):
            g["sample_reason"] = p["reason"]
        if g["sample_answer"] is None and key[0] == "rejected before the gate":
            answers = [a.get("answer") for a in details.get("attempts") or [] if a.get("answer")]
            g["sample_answer"] = details.get("rejected_source") or (answers[-1] if answers else None)
    return sorted(groups.values(), key=lambda g: (order.index(g["outcome"]), -g["count"], str(g["failure"])))


def outcome_lines(r: "AdaptiveGEPAResult") -> list[str]:
    """The proposals-by-outcome table, repairs, and one sample of a rejected answer (Markdown)."""
    rows = proposal_outcomes(r.proposals)
    repairs = sum(int((p.get("details") or {}).get("repairs") or 0) for p in r.proposals)
    formats = Counter((p.get("details") or {}).get("format") for p in r.proposals)
    formats.pop(None, None)
    lines = ["", "## Proposals by outcome", "",
             "| outcome | why | proposals | of them repaired |", "|---|---|---:|---:|"]
    lines += [f"| {g['outcome']} | {md_cell(FAILURE_WORDS.get(g['failure'], g['failure'] or '-'))} | {g['count']} | "
              f"{g['repaired']} |" for g in rows]
    if not rows:
        lines.append("| (no proposal was made) | - | 0 | 0 |")
    lines += ["", f"Repair calls (reflection calls that answered a rejection with its reason; never scored "
                  f"calls): {repairs}." + (" Program formats used: " + ", ".join(
                      f"{k} {v}" for k, v in sorted(formats.items())) + "." if formats else "")]
    rejected = [g for g in rows if g["outcome"] == "rejected before the gate" and g["sample_answer"]]
    if rejected:
        g = rejected[0]
        lines += ["", f"One rejected answer ({md_text(FAILURE_WORDS.get(g['failure'], str(g['failure'])))}), "
                      "as the reflection LM wrote it:", "", md_fence(str(g["sample_answer"])[:1500], "text"), "",
                  "Its reason:", "", md_fence(str(g["sample_reason"] or "")[:600], "text")]
    return lines


def rollout_error_lines(faults: Mapping[str, Any] | None) -> list[str]:
    """What the failed rollouts' errors were, most common first (the error's first line)."""
    errors = (faults or {}).get("failed_rollout_errors") or []
    if not errors:
        return []
    lines = ["", "What the failed rollouts raised (each scored as a failure), most common first:", ""]
    lines += [f"- {n} x: {md_text(error)}" for error, n in errors]
    return lines


def accepted_edit_lines(r: "AdaptiveGEPAResult") -> list[str]:
    """Every accepted proposal -- also those that did not beat the seed on validation -- with what it changed."""
    accepted = [p for p in r.proposals if p.get("accepted") and p.get("child_index") is not None]
    if not accepted:
        return []
    seed = r.val_aggregate_scores[0]
    lines = ["", "## Accepted edits", "",
             f"Each passed its minibatch gate and was validated; the seed's validation mean is {seed:.4f}.", "",
             "| iteration | candidate | action | slot | minibatch parent -> child | validation mean | vs seed |",
             "|---:|---:|---|---:|---|---:|---|"]
    for p in accepted:
        i = p["child_index"]
        val = r.val_aggregate_scores[i]
        verdict = "above" if val > seed else "tie" if val == seed else "below"
        sums = (f"{p['parent_sum']:.2f} -> {p['child_sum']:.2f}" if p.get("parent_sum") is not None
                and p.get("child_sum") is not None else "-")
        lines.append(f"| {p['iteration']} | #{i} | {md_cell(p.get('action') or p['kind'])} | "
                     f"{p.get('slot') if p.get('slot') is not None else '-'} | {sums} | {val:.4f} | {verdict} |")
    for p in accepted:
        lines += ["", f"Candidate #{p['child_index']} ({md_code(p.get('action') or p['kind'])}):", "",
                  *edit_text(r.candidates[p["child_index"]], p.get("action"), p.get("slot"))]
    return lines


def edit_text(library: Any, action: str | None, slot: int | None) -> list[str]:
    """What an accepted edit wrote, as fenced text: the router, or the slot's description and program."""
    if action == "rewrite_router":
        return ["Router:", "", md_fence(clip(library.router, 1500), "text")]
    if slot is None or not library.slot(slot).active:        # a merge: the library it assembled
        return [f"- slot {k} ({md_text(sl.profile)}): {md_text(clip(sl.description, 300))}"
                for k, sl in library.items() if sl.active] or ["- no active specialist"]
    target = library.slot(slot)
    out = ["Description:", "", md_fence(clip(target.description, 800), "text")]
    if action != "rewrite_description":
        out += ["", md_fence(clip(target.program_source, 3000), "python")]
    return out


def metric_fault_lines(faults: Mapping[str, Any] | None) -> list[str]:
    """What the metric faults were: the most common notes (e.g. a judge cut off at its token limit)."""
    notes = (faults or {}).get("metric_fault_notes") or []
    if not notes:
        return []
    lines = ["", "What the metric faults were (each scored as a failure), most common first:", ""]
    lines += [f"- {n} x: {md_text(note)}" for note, n in notes]
    return lines


# -- writing the record --------------------------------------------------------------------------------

def write_run_record(result: AdaptiveGEPAResult, log_dir: str | Path) -> Path:
    """run.json, report.md and learning_curve.png of a search (through the one record writer)."""
    from dspy_adaptive.record.writer import write_record
    return write_record(log_dir, data=result.to_dict(), report=render_markdown(result),
                        plots={"learning_curve.png": lambda path: plot_learning_curve(result, path)})


#: The demo's search, inside its --out folder (the optimizer's log_dir there).
DEMO_SEARCH_DIR = "search"


def run_json_path(log_dir: str | Path) -> Path:
    """The run.json of the run in `log_dir`: log_dir/run.json, or, for a demo's --out folder, the one of the search
    it holds (--out/search). FileNotFoundError otherwise, naming the folders below that hold one."""
    root = Path(log_dir)
    for path in (root / "run.json", root / DEMO_SEARCH_DIR / "run.json"):
        if path.is_file():
            return path
    inside = sorted(str(p.parent) for p in root.glob("*/run.json")) if root.is_dir() else []
    where = (f" A finished run's run.json is in {', '.join(repr(d) for d in inside[:5])}"
             f"{', ...' if len(inside) > 5 else ''}: pass that folder." if inside else "")
    raise FileNotFoundError(f"{root / 'run.json'} not found: is {str(log_dir)!r} the log_dir of a finished run (or "
                            f"a demo's --out folder)?{where}")


def load_run(log_dir: str | Path) -> AdaptiveGEPAResult:
    """The record of the finished run in `log_dir` (a demo's --out folder opens its search: `run_json_path`)."""
    path = run_json_path(log_dir)
    return AdaptiveGEPAResult.from_dict(json.loads(path.read_text(encoding="utf-8")))


def best_so_far(result: AdaptiveGEPAResult) -> list[tuple[int, float]]:
    points, best = [], float("-inf")
    for calls, score in sorted(zip(result.discovery_eval_counts, result.val_aggregate_scores)):
        best = max(best, score)
        points.append((calls, best))
    return points


def plot_learning_curve(result: AdaptiveGEPAResult, path: str | Path) -> None:
    """Best validation mean vs scored calls, every candidate as a point."""
    from dspy_adaptive.record.curves import learning_curve
    learning_curve(path, best_so_far(result), end=result.total_metric_calls,
                   points=list(zip(result.discovery_eval_counts, result.val_aggregate_scores)),
                   title="Adaptive-GEPA: validation mean vs scored calls", ylabel="validation mean")


def usage_lines(r: AdaptiveGEPAResult) -> list[str]:
    """The cost ledger: LM calls, tokens and USD per role, then per proposal (litellm's list prices). Calls of
    models without a list price (local or scripted models) are said to be unpriced rather than shown as $0; a
    run with no priced call has no USD columns at all."""
    total = {k: sum(v.get(k, 0) for v in r.usage.values()) for k in ("calls", "prompt_tokens", "completion_tokens",
                                                                     "cost", "unpriced_calls")}
    priced = total["calls"] > total["unpriced_calls"] or total["cost"] > 0
    if not priced:
        lines = ["", "## LM usage by role", "", "Every call was to a model without a list price (a local or scripted "
                 "model): unpriced, so no USD is shown.", "",
                 "| role | calls | prompt tokens | completion tokens |", "|---|---:|---:|---:|"]
        lines += [f"| {md_cell(k)} | {int(v['calls'])} | {int(v['prompt_tokens'])} | {int(v['completion_tokens'])} |"
                  for k, v in r.usage.items()]
        lines.append(f"| **total** | {int(total['calls'])} | {int(total['prompt_tokens'])} | "
                     f"{int(total['completion_tokens'])} |")
        return lines

    def usd(v: Mapping[str, Any]) -> str:
        if v.get("calls") and v.get("unpriced_calls", 0) >= v["calls"] and not v.get("cost"):
            return "unpriced"
        return f"{v.get('cost', 0.0):.4f}" + (f" (+{int(v['unpriced_calls'])} unpriced)"
                                              if v.get("unpriced_calls") else "")

    lines = ["", "## LM usage and cost by role", "", "| role | calls | prompt tokens | completion tokens | USD |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {md_cell(k)} | {int(v['calls'])} | {int(v['prompt_tokens'])} | {int(v['completion_tokens'])} | "
              f"{usd(v)} |" for k, v in r.usage.items()]
    lines.append(f"| **total** | {int(total['calls'])} | {int(total['prompt_tokens'])} | "
                 f"{int(total['completion_tokens'])} | {usd(total)} |")
    costed = [p for p in r.proposals if p.get("usage")]
    if costed:
        roles = sorted({k for p in costed for k in p["usage"]})
        lines += ["", "## Cost per proposal (USD)", "",
                  "| iteration | kind | action | accepted | scored calls at | " + " | ".join(roles) + " | total |",
                  "|---:|---|---|---|---:|" + "---:|" * (len(roles) + 1)]
        for p in costed:
            per = [p["usage"].get(k, {}).get("cost", 0.0) for k in roles]
            lines.append(f"| {p['iteration']} | {p['kind']} | {p['action'] or '-'} | {'yes' if p['accepted'] else 'no'}"
                         f" | {p['budget_at']} | " + " | ".join(f"{c:.4f}" for c in per) + f" | {sum(per):.4f} |")
    return lines


def sandbox_markdown(report: Mapping[str, Any] | None) -> list[str]:
    """The report's "Sandbox" section: which isolation layers held for the run's specialists, and why any
    did not (from `IsolationReport.to_dict()`)."""
    lines = ["## Sandbox", ""]
    if not report:
        return lines + ["_No isolation report was recorded for this run._"]
    requested, available = report.get("requested") or {}, report.get("available") or {}
    applied, missing = report.get("applied") or {}, report.get("missing") or {}
    who = "root" if report.get("root") else "an ordinary user"
    held = [k for k in requested if k not in missing]
    lines.append(f"Specialists ran on {md_text(report.get('platform', '?'))} as {who}, isolation mode "
                 f"`{md_text(report.get('mode', '?'))}`: {len(held)} of {len(requested)} OS layers held"
                 + (" (every one)." if not missing else "."))
    lines += ["", "| layer | held | why not |", "|---|---|---|"]
    for k in [*requested, *(m for m in missing if m not in requested)]:
        ok = k not in missing
        note = "yes" + (", confirmed by a worker" if applied.get(k) else "") if ok else "no"
        if ok and k == "landlock" and report.get("landlock_abi"):
            note += f" (ABI {int(report['landlock_abi'])})"
        why = md_cell(missing.get(k, "")) if not ok else ("" if available.get(k, True) else "unavailable")
        lines.append(f"| {md_cell(k)} | {note} | {why} |")
    lines += ["", "The host bridge, the static policy and the per-call timeouts hold on every platform; "
                  "see the README's safety model."]
    return lines


def _accounting_line(r: AdaptiveGEPAResult) -> str:
    a = budget_accounting(r.budget["by_kind"])
    return (f"- as the paper counts them (Appendix L): {a['validation']} validation scores ({a['full_validation']} "
            f"full-validation + {a['merge_check']} merge-check) + {a['feedback']} feedback scores = {a['total']}")


def _census_line(r: AdaptiveGEPAResult) -> str:
    c = r.merge_census or merge_census(r.proposals)
    classes = ", ".join(f"{k} {v}" for k, v in c["classes"].items() if v) or "none"
    return (f"- merges: {c['checks']} checks ({c['check_scores']} scores), {c['passed']} passed and validated; "
            f"parent copies checked {c['parent_copies_checked']}, skipped {c['parent_copies_skipped']}; "
            f"accepted by Table 10 class: {classes}")


def render_markdown(r: AdaptiveGEPAResult) -> str:
    best = r.best_candidate
    lines = ["# Adaptive-GEPA run", "",
             f"- candidates archived: {len(r.candidates)}; best: #{r.best_idx} with validation mean "
             f"{r.val_aggregate_scores[r.best_idx]:.4f} (seed #0: {r.val_aggregate_scores[0]:.4f})",
             f"- stopped: {r.stop_reason or 'n/a'}",
             f"- reproducibility: {r.reproducibility or 'n/a'}",
             f"- scored calls: {r.budget['spent']} of {r.budget['max']} (overshoot {r.budget['overshoot']}); by kind: "
             + ", ".join(f"{k} {v}" for k, v in r.budget["by_kind"].items() if v),
             _accounting_line(r), _census_line(r), "",
             "## Proposals by action (accepted = passed the gate and entered the archive)", "",
             "| action | proposed | accepted |", "|---|---:|---:|"]
    lines += [f"| {md_cell(a)} | {c['proposed']} | {c['accepted']} |" for a, c in r.action_counts.items()]
    f = r.faults or {}
    if f:
        kinds = ", ".join(f"{md_text(k)} {v}" for k, v in f.get("failed_rollouts_by_type", {}).items())
        lines += ["", f"Absorbed faults: {f.get('failed_rollouts', 0)} failed rollouts "
                      f"({kinds or 'none'}), "
                      f"{f.get('metric_faults', 0)} metric faults, "
                      f"{f.get('failed_reflections', 0)} failed reflections, "
                      f"{f.get('lost_to_interruptions', 0)} scored calls lost to interruptions."]
        lines += rollout_error_lines(f)
        lines += metric_fault_lines(f)
    lines += outcome_lines(r)
    lines += accepted_edit_lines(r)
    lines += usage_lines(r)
    if r.endpoints:
        lines += ["", "LM endpoints (pooled LMs, through litellm's Router):", "",
                  "| endpoint | calls | prompt tokens | completion tokens |", "|---|---:|---:|---:|"]
        lines += [f"| {md_cell(ep)} | {c['calls']} | {c['prompt_tokens']} | {c['completion_tokens']} |"
                  for ep, c in sorted(r.endpoints.items())]
    from dspy_adaptive.distill.report import markdown_lines as distilled_router_lines
    lines += distilled_router_lines(r.distilled_router)
    lines += ["", *sandbox_markdown(r.sandbox)]
    routes = Counter(v for v in r.executed[r.best_idx].values())
    lines += ["", f"## Routing of the best candidate on validation ({len(r.executed[r.best_idx])} rows)", ""]
    lines += [f"- {slot_label(k)}: {n}"
              for k, n in sorted(routes.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))]
    lines += ["", "## Best library", "", "Router:", "", md_fence(best.router, "text"), ""]
    for k, slot in best.items():
        if slot.active:
            lines += [f"### Slot {k} ({md_text(slot.profile)})", "", "Description:", "",
                      md_fence(slot.description, "text"), "", md_fence(slot.program_source, "python"), ""]
    lines += ["## Candidates", "", "| # | origin | parents | val mean | found at (calls) | active slots |",
              "|---:|---|---|---:|---:|---|"]
    for i, lib in enumerate(r.candidates):
        lines.append(f"| {i} | {md_cell(r.origins[i])} | {','.join(map(str, r.parents[i])) or '-'} | "
                     f"{r.val_aggregate_scores[i]:.4f} | {r.discovery_eval_counts[i]} | "
                     f"{','.join(map(str, lib.active_ids())) or '-'} |")
    return "\n".join(lines) + "\n"
