"""tables.py on hand-made results dicts."""

from benchmarks import tables


def _res(method, scores, budget=(100, 120), routing=None, actions=None):
    rows = [{"id": f"{f}{i}", "family": f, "score": s, "route": None} for f, ss in scores.items()
            for i, s in enumerate(ss)]
    out = {"method": method, "budget": {"nominal": budget[0], "used": budget[1]}, "test": rows}
    if routing:
        out["routing"] = routing
    if actions:
        out["action_counts"] = actions
    return out


SCORES = {"hotpotqa": [1.0, 0.0, 0.5], "aime": [0.2], "pupa": [1.0, 1.0], "livebench_if": [0.75]}


def test_summary_family_mean_is_the_unweighted_mean_of_family_means():
    s = tables.summarize(_res("adaptive", SCORES))
    assert s["family_scores"] == {"hotpotqa": 0.5, "aime": 0.2, "pupa": 1.0, "livebench_if": 0.75}
    assert abs(s["family_mean"] - (0.5 + 0.2 + 1.0 + 0.75) / 4) < 1e-12
    assert abs(s["example_mean"] - (1.5 + 0.2 + 2.0 + 0.75) / 7) < 1e-12
    assert s["n"] == {"hotpotqa": 3, "aime": 1, "pupa": 2, "livebench_if": 1}


def test_table2_rows_columns_and_budget():
    text = tables.table2([_res("seed", SCORES), _res("adaptive", SCORES), _res("mop", SCORES, (100, 40))])
    lines = text.splitlines()
    assert lines[0].startswith("| Method | Budget (calls) | HotpotQA (n=3) | AIME (n=1) | PUPA (n=2) | LB-IF (n=1)")
    assert "| Generic seed | — | 50.0 | 20.0 | 100.0 | 75.0 | 61.3 | 63.6 |" in lines
    assert "| Adaptive-GEPA | 120 / 100 |" in text and "| MoP | 40 (native) |" in text


def test_table4_majority_mapping_agreement():
    routing = {"hotpotqa": {"1": 3}, "aime": {"2": 1}, "pupa": {"1": 1, "0": 1}, "livebench_if": {"0": 1}}
    res = _res("adaptive", SCORES, routing=routing)
    text = tables.table4([res, _res("seed", SCORES)])
    assert "| Family | Adaptive-GEPA |" in text and "Generic seed" not in text
    assert "| HotpotQA | 100.0 |" in text and "| PUPA | 0.0 |" in text and "| LB-IF | 100.0 |" in text
    # slot 1 -> hotpotqa, slot 2 -> aime, fallback 0 -> tie pupa/livebench_if -> alphabetical livebench_if
    assert "| Overall | 71.4 |" in text   # 5 of 7 rows
    assert tables.routing_from_rows([{"family": "aime", "route": 2}, {"family": "aime", "route": None}]) == \
        {"aime": {"2": 1, "None": 1}}


def test_table5_local_total_and_merges():
    actions = {"activate": {"proposed": 22, "accepted": 16}, "rewrite_program": {"proposed": 38, "accepted": 27},
               "rewrite_router": {"proposed": 12, "accepted": 8}, "rewrite_description": {"proposed": 4, "accepted": 1},
               "deactivate": {"proposed": 0, "accepted": 0}, "merge": {"proposed": 47, "accepted": 26}}
    text = tables.table5(actions)
    assert "| Activate specialist | 22 | 16 |" in text
    assert "| **Total (local)** | 76 | 52 |" in text and "| Merge | 47 | 26 |" in text


def test_render_run_and_compare():
    res = _res("adaptive", SCORES, routing={"aime": {"1": 1}}, actions={"activate": {"proposed": 1, "accepted": 1}})
    text = tables.render_run(res)
    assert "Table 2" in text and "Table 4" in text and "Table 5" in text
    both = tables.render_compare([_res("seed", SCORES), res])
    assert "Generic seed" in both and "Adaptive-GEPA" in both and "Table 4" in both
