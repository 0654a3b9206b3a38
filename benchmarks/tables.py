"""Markdown tables of the paper's benchmark (Tables 2, 4, 5) from `benchmarks.run` results dicts. Pure.

A results dict (``results.json``) holds at least ``method``, ``budget`` ({"nominal", "used"}) and
``test``: one row per test example ``{"id", "family", "score", "route"?}`` where ``score`` is already
the per-problem mean over attempts (AIME pass@1). Routed methods add ``routing`` (family -> slot ->
count, slot keys as strings in JSON); Adaptive-GEPA adds ``action_counts`` ({action: {proposed, accepted}}).

* Table 2: per-family test score ×100, family mean (primary: unweighted mean of family means),
  example mean (every test example weighted equally), budget (scored calls used / nominal).
* Table 4: routing agreement (%) under a post-hoc majority-family mapping of executed slots
  (`dspy_adaptive.record.analysis.majority_mapping_agreement`; the fallback is its own slot 0).
* Table 5: proposed / accepted edits by action (local edits; merges listed separately).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Mapping, Sequence

from dspy_adaptive.record.analysis import majority_mapping_agreement, markdown_table
from dspy_adaptive.schema import slot_label
from dspy_adaptive.tasks import FAMILIES

FAMILY_TITLES = {"hotpotqa": "HotpotQA", "aime": "AIME", "pupa": "PUPA", "livebench_if": "LB-IF"}
METHOD_TITLES = {"seed": "Generic seed", "mop": "MoP", "grpo": "GRPO", "gepa-fpa-all": "GEPA-FPA-ALL",
                 "adaptive": "Adaptive-GEPA", "oeo": "Open-ended (OEO)", "one-shot": "One-shot rewrite",
                 "per-family-fpa": "Per-family GEPA-FPA (labels)"}
ACTION_TITLES = {"activate": "Activate specialist", "rewrite_program": "Rewrite program",
                 "rewrite_router": "Rewrite router", "rewrite_description": "Rewrite description",
                 "deactivate": "Deactivate", "malformed": "Malformed proposal", "merge": "Merge"}


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{100.0 * x:.1f}"


def family_scores(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    groups: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        groups[r["family"]].append(float(r["score"]))
    return {f: sum(v) / len(v) for f, v in groups.items() if v}


def summarize(results: Mapping[str, Any]) -> dict[str, Any]:
    rows = results.get("test", [])
    fam = family_scores(rows)
    return {
        "family_scores": fam,
        "n": dict(Counter(r["family"] for r in rows)),
        "family_mean": sum(fam.values()) / len(fam) if fam else None,
        "example_mean": sum(float(r["score"]) for r in rows) / len(rows) if rows else None,
    }


def _families(results_list: Sequence[Mapping[str, Any]]) -> list[str]:
    seen = {r["family"] for res in results_list for r in res.get("test", [])}
    return [f for f in FAMILIES if f in seen] + sorted(seen - set(FAMILIES))


def _budget(res: Mapping[str, Any]) -> str:
    b = res.get("budget") or {}
    used, nominal = b.get("used"), b.get("nominal")
    if res.get("method") == "seed":
        return "—"
    if res.get("method") == "mop":
        return f"{used} (native)"
    return f"{used} / {nominal}" if nominal is not None else str(used)


def table2(results_list: Sequence[Mapping[str, Any]]) -> str:
    """Paper Table 2 form: one row per method."""
    fams = _families(results_list)
    ns = Counter()
    for res in results_list:
        for f, n in summarize(res)["n"].items():
            ns[f] = max(ns[f], n)
    headers = ["Method", "Budget (calls)"] + [f"{FAMILY_TITLES.get(f, f)} (n={ns[f]})" for f in fams] + \
        ["Family mean", "Example mean"]
    distilled = any(_distilled(res) for res in results_list)
    if distilled:
        headers.append("Example mean, distilled router (--distill-router)")
    rows = []
    for res in results_list:
        s = summarize(res)
        rows.append([METHOD_TITLES.get(res.get("method"), str(res.get("method"))), _budget(res)]
                    + [_fmt(s["family_scores"].get(f)) for f in fams]
                    + [_fmt(s["family_mean"]), _fmt(s["example_mean"])])
        if distilled:
            d = _distilled(res)
            rows[-1].append("—" if d is None else f"{_fmt(d['scores']['distilled'])} "
                                                  f"({100 * d['scores']['paired']['diff']:+.1f})")
    return markdown_table(headers, rows)


def _distilled(res: Mapping[str, Any]) -> Mapping[str, Any] | None:
    d = res.get("distill")
    return d if d and d.get("built") else None


def distill_table(results_list: Sequence[Mapping[str, Any]]) -> str:
    """`--distill-router`: the distilled router against the LM router on test, per run that has one."""
    headers = ["Method", "Features", "Agreement", "LM router still called", "Router calls saved",
               "Router tokens saved", "Routing ms/request (LM)", "Routing ms/request (distilled)", "Score (LM router)",
               "Score (distilled)", "Diff [95% CI]", "p", "Rerun"]
    rows = []
    for res in results_list:
        d = res.get("distill")
        title = METHOD_TITLES.get(res.get("method"), str(res.get("method")))
        if not d:
            continue
        if not d.get("built"):
            rows.append([title, "not built: " + str(d.get("reason", ""))[:160]] + ["—"] * (len(headers) - 2))
            continue
        r, sc = d["routing"], d["scores"]
        p = sc["paired"]
        star = " *" if p.get("significant") else ""
        rows.append([title, str(d["router"].get("features", "")), f"{100 * r['agreement']:.1f}%",
                     f"{100 * r['share_lm_router']:.1f}%", f"{r['router_calls_saved']} / {r['router_calls_lm']}",
                     f"{r['router_tokens_saved']} / {r['router_tokens_lm']}", f"{r['latency_ms_lm']:.2f}",
                     f"{r['latency_ms_distilled']:.2f}", _fmt(sc["lm"]), _fmt(sc["distilled"]),
                     f"{100 * p['diff']:+.1f}{star} [{100 * p['ci_low']:+.1f}, {100 * p['ci_high']:+.1f}]",
                     f"{p['p_value']:.3g}", str(sc["rerun"])])
    if not rows:
        return "_No run with --distill-router._"
    return markdown_table(headers, rows)


DISTILL_NOTE = ("Agreement: the slot served (the distilled router's, or the LM router's below the threshold) equals "
                "the LM router's, on every test request. Scores ×100; a request the distilled router routes where the "
                "test phase ran it keeps its score, the others (Rerun) are run and scored again; the difference and "
                "its 95% bootstrap interval are benchmarks.protocol's paired statistics (* : the interval excludes 0). "
                "Tokens are those the LM reported (a cached call reports none).")


def routing_from_rows(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """family -> executed slot (as a string; "None" = unknown) -> test examples."""
    table: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        table[r["family"]][str(r.get("route"))] += 1
    return {f: dict(sorted(c.items())) for f, c in sorted(table.items())}


def _routing_table(routing: Mapping[str, Mapping[Any, int]]) -> dict[str, dict[int | None, int]]:
    def slot(k: Any) -> int | None:
        return None if k in (None, "None", "null") else int(k)
    return {f: {slot(k): int(n) for k, n in c.items()} for f, c in routing.items()}


def agreement(results: Mapping[str, Any]) -> tuple[dict[str, float], float] | None:
    routing = results.get("routing")
    if not routing:
        return None
    return majority_mapping_agreement(_routing_table(routing))


def table4(results_list: Sequence[Mapping[str, Any]]) -> str:
    """Paper Table 4 form: family agreement (%) under a post-hoc majority-family mapping, per routed method."""
    routed = [(res, agreement(res)) for res in results_list]
    routed = [(res, a) for res, a in routed if a is not None]
    if not routed:
        return "_No routed method in these results._"
    fams = _families([res for res, _ in routed])
    headers = ["Family"] + [METHOD_TITLES.get(res["method"], res["method"]) for res, _ in routed]
    rows = [[FAMILY_TITLES.get(f, f)] + [f"{a[0].get(f, 0.0):.1f}" for _, a in routed] for f in fams]
    rows.append(["Overall"] + [f"{a[1]:.1f}" for _, a in routed])
    return markdown_table(headers, rows)


def routing_counts(results: Mapping[str, Any]) -> str:
    """family x executed slot counts on the test set (slot 0 = fallback for Adaptive-GEPA; clusters for MoP)."""
    table = _routing_table(results.get("routing") or {})
    slots = sorted({s for c in table.values() for s in c}, key=lambda s: (s is None, s or 0))
    label = slot_label if results.get("method") == "adaptive" else \
        (lambda s: "unknown" if s is None else f"cluster {s}")
    fams = [f for f in FAMILIES if f in table] + sorted(set(table) - set(FAMILIES))
    rows = [[FAMILY_TITLES.get(f, f)] + [table[f].get(s, 0) for s in slots] for f in fams]
    return markdown_table(["Family"] + [label(s) for s in slots], rows)


def table5(action_counts: Mapping[str, Mapping[str, int]]) -> str:
    """Paper Table 5 form: local edits proposed / accepted by action, a local total, then merges."""
    local = [(a, c) for a, c in action_counts.items() if a != "merge"]
    rows = [[ACTION_TITLES.get(a, a), int(c.get("proposed", 0)), int(c.get("accepted", 0))] for a, c in local]
    rows.append(["**Total (local)**", sum(int(c.get("proposed", 0)) for _, c in local),
                 sum(int(c.get("accepted", 0)) for _, c in local)])
    if "merge" in action_counts:
        m = action_counts["merge"]
        rows.append(["Merge", int(m.get("proposed", 0)), int(m.get("accepted", 0))])
    return markdown_table(["Edit", "Proposed", "Accepted"], rows)


def merges_and_accounting(results: Mapping[str, Any]) -> str:
    """Beside Table 5: merge checks, passes and validations, the Table 10 classes of the accepted merges,
    and the budget as the paper accounts it (Appendix L: validation + feedback scores = total)."""
    c, a = results.get("merge_census") or {}, results.get("accounting") or {}
    lines = []
    if c:
        lines += [markdown_table(["Merges", "Checks", "Check scores", "Passed", "Validated", "Parent copies checked",
                                  "Parent copies skipped"],
                                 [["Aligned merge", c["checks"], c["check_scores"], c["passed"], c["validated"],
                                   c["parent_copies_checked"], c["parent_copies_skipped"]]]), "",
                  "Accepted merges by Table 10 class: "
                  + (", ".join(f"{k} {v}" for k, v in c["classes"].items() if v) or "none"), ""]
    if a:
        lines += [f"Scored calls as the paper accounts them: {a['validation']} validation "
                  f"({a['full_validation']} full-validation + {a['merge_check']} merge-check) + {a['feedback']} "
                  f"feedback = {a['total']}"]
    return "\n".join(lines)


def table2_notes(results_list: Sequence[Mapping[str, Any]]) -> str:
    """Table 2's notes: which retriever ran (and the data notes), once per distinct note."""
    notes = list(dict.fromkeys(n for res in results_list for n in res.get("notes", [])))
    return "\n".join(f"- {n}" for n in notes)


def split_overlap_table(overlap: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """Per family and pair of splits: shared supporting titles (HotpotQA) and the share of requests with a word
    8-gram in common."""
    lines = ["| family | splits | shared titles | requests sharing an 8-gram |", "|---|---|---:|---:|"]
    for fam, pairs in overlap.items():
        for pair, e in pairs.items():
            titles = e.get("shared_titles")
            share = f"{e['ngram_requests']} ({100 * e['ngram_share']:.0f}%)"
            lines.append(f"| {FAMILY_TITLES.get(fam, fam)} | {pair.replace('~', ' / ')} | "
                         f"{'—' if titles is None else titles} | {share} |")
    return "\n".join(lines)


def render_run(results: Mapping[str, Any]) -> str:
    title = METHOD_TITLES.get(results.get("method"), results.get("method"))
    parts = [f"# {title}: test results", "", "## Table 2 — test score (×100)", "", table2([results]), ""]
    if results.get("notes"):
        parts += ["Notes:", "", table2_notes([results]), ""]
    if results.get("selection"):
        sel = results["selection"]
        parts += ["## Fresh selection split (against selection optimism)", "",
                  f"Finalists {sel['finalists']} (validation means "
                  f"{', '.join(f'{m:.3f}' for m in sel['validation_means'])}) re-scored on {sel['selection_rows']} "
                  f"held-apart requests x {sel['rollouts']} rollouts: "
                  f"{', '.join(f'{m:.3f}' for m in sel['selection_means'])}.", "",
                  "| pick | candidate | test mean |", "|---|---:|---:|",
                  f"| validation | #{sel['validation_pick']} | {sel['test_validation_pick']:.3f} |",
                  f"| fresh selection split | #{sel['selection_pick']} | {sel['test_selection_pick']:.3f} |", ""]
    if results.get("distill"):
        parts += ["## Distilled router (--distill-router): against the LM router on test", "",
                  distill_table([results]), "", DISTILL_NOTE, ""]
    if results.get("split_overlap"):
        parts += ["## Split overlap (measured)", "", split_overlap_table(results["split_overlap"]), ""]
    if results.get("routing"):
        parts += ["## Table 4 — routing agreement (%) under a post-hoc majority-family mapping (test)", "",
                  table4([results]), "", "Executed-slot counts:", "", routing_counts(results), ""]
    if results.get("method") == "oeo" and results.get("oeo_actions"):
        parts += ["## Table 5 (OEO) — optimizer actions (turns / refused by the contract)", "",
                  "| action | turns | refused |", "|---|---:|---:|"]
        parts += [f"| {a} | {c['turns']} | {c['refused']} |" for a, c in results["oeo_actions"].items()] + [""]
    if results.get("method") == "adaptive":
        parts += ["## Table 5 — proposed / accepted edits by action", "", table5(results.get("action_counts") or {}),
                  ""]
        if results.get("merge_census") or results.get("accounting"):
            parts += ["## Merges and budget accounting (Appendices H, L)", "", merges_and_accounting(results), ""]
    return "\n".join(parts)


def render_compare(results_list: Sequence[Mapping[str, Any]]) -> str:
    parts = ["# Benchmark comparison", "", "## Table 2 — test score (×100)", "", table2(results_list), ""]
    if any(res.get("notes") for res in results_list):
        parts += ["Notes:", "", table2_notes(results_list), ""]
    if any(res.get("routing") for res in results_list):
        parts += ["## Table 4 — routing agreement (%) (test)", "", table4(results_list), ""]
    if any(res.get("distill") for res in results_list):
        parts += ["## Distilled router (--distill-router) (test)", "", distill_table(results_list), "",
                  DISTILL_NOTE, ""]
    return "\n".join(parts)


__all__ = ["agreement", "distill_table", "family_scores", "render_compare", "render_run", "routing_counts",
           "routing_from_rows", "summarize", "table2", "table4", "table5"]
