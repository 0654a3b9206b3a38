"""benchmarks.protocol: paired statistics checked against scipy and hand-computed cases."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from benchmarks import protocol
from benchmarks.protocol import POOLED, compare_methods, find_runs, paired_stats, selection_gaps


def test_hand_computed_case():
    ref = [0.0, 0.0, 1.0, 1.0, 0.5]
    new = [1.0, 0.0, 1.0, 0.0, 1.0]
    s = paired_stats(ref, new)
    d = np.array(new) - np.array(ref)          # [1, 0, 0, -1, 0.5]
    assert s.n == 5 and s.reference_mean == pytest.approx(0.5) and s.method_mean == pytest.approx(0.6)
    assert s.diff == pytest.approx(0.1)
    assert (s.wins, s.ties, s.losses) == (2, 2, 1)
    assert s.effect_size == pytest.approx(0.1 / d.std(ddof=1))
    assert s.p_value == pytest.approx(stats.wilcoxon(d, zero_method="zsplit").pvalue)
    assert s.ci_low < 0.1 < s.ci_high and not s.significant


def test_interval_matches_scipy_bootstrap_on_the_differences():
    rng = np.random.default_rng(1)
    ref = rng.uniform(size=60)
    new = np.clip(ref + rng.normal(0.15, 0.1, size=60), 0, 1)
    s = paired_stats(ref, new, n_resamples=4999, seed=7)
    expected = stats.bootstrap((new - ref,), np.mean, n_resamples=4999, method="BCa",
                               random_state=np.random.default_rng(7)).confidence_interval
    assert s.ci_low == pytest.approx(expected.low, abs=0.01) and s.ci_high == pytest.approx(expected.high, abs=0.01)
    assert s.significant and s.p_value < 0.001 and s.wins > s.losses


def test_identical_scores_are_a_tie_with_p_one():
    s = paired_stats([0.2, 0.4, 1.0], [0.2, 0.4, 1.0])
    assert (s.diff, s.ci_low, s.ci_high, s.p_value, s.effect_size) == (0.0, 0.0, 0.0, 1.0, 0.0)
    assert (s.wins, s.ties, s.losses) == (0, 3, 0) and not s.significant


def test_constant_shift_has_a_degenerate_interval():
    s = paired_stats([0.0, 0.5, 0.2], [0.1, 0.6, 0.3])
    assert s.ci_low == pytest.approx(0.1) and s.ci_high == pytest.approx(0.1) and s.significant
    assert s.effect_size is None                     # d_z is undefined with no spread, not 0


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="equal-length"):
        paired_stats([1.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="no paired"):
        paired_stats([], [])


def write_run(path, method, seed, scores, best_val=None):
    path.mkdir(parents=True, exist_ok=True)
    rows = [{"id": rid, "family": fam, "score": score} for rid, (fam, score) in scores.items()]
    extra = {} if best_val is None else {"best_val": best_val}
    (path / "results.json").write_text(json.dumps({"method": method, "config": {"seed": seed}, "test": rows,
                                                   "search": {"extra": extra}}))
    return path


def test_runs_pair_by_seed_and_request_and_pool(tmp_path):
    base = {"a": ("qa", 0.0), "b": ("qa", 1.0), "c": ("math", 0.0), "d": ("math", 0.0)}
    better = {"a": ("qa", 1.0), "b": ("qa", 1.0), "c": ("math", 1.0), "d": ("math", 0.0)}
    for seed in (0, 1):
        write_run(tmp_path / "seed" / f"seed-{seed}", "seed", seed, base)
        write_run(tmp_path / "adaptive" / f"seed-{seed}", "adaptive", seed, better, best_val=0.9)
    runs = find_runs([tmp_path / "seed", tmp_path / "adaptive"])
    cmp = compare_methods(runs, "seed", n_resamples=999)
    overall = cmp["adaptive"]["overall"]
    assert set(overall) == {0, 1, POOLED}
    assert overall[0].n == 4 and overall[POOLED].n == 8
    assert overall[POOLED].diff == pytest.approx(0.5) and (overall[POOLED].wins, overall[POOLED].ties) == (4, 4)
    assert cmp["adaptive"]["qa"][POOLED].n == 4 and cmp["adaptive"]["math"][0].diff == pytest.approx(0.5)
    gaps = {(g["method"], g["seed"]): g for g in selection_gaps(runs)}
    assert gaps[("adaptive", 0)]["gap"] == pytest.approx(0.9 - 0.75) and gaps[("seed", 0)]["gap"] is None


def test_cli_writes_the_report_and_refuses_a_missing_reference(tmp_path, capsys):
    write_run(tmp_path / "s", "seed", 0, {"a": ("qa", 0.0), "b": ("qa", 1.0)})
    write_run(tmp_path / "m", "one-shot", 0, {"a": ("qa", 1.0), "b": ("qa", 1.0)}, best_val=None)
    assert protocol.main([str(tmp_path / "s"), str(tmp_path / "m"), "--out", str(tmp_path / "p"),
                          "--resamples", "199"]) == 0
    md = (tmp_path / "p" / "protocol.md").read_text()
    assert "## one-shot" in md and "| qa | pooled | 2 |" in md and "Selection optimism" in md
    data = json.loads((tmp_path / "p" / "protocol.json").read_text())
    assert data["comparison"]["one-shot"]["overall"]["pooled"]["diff"] == pytest.approx(0.5)
    for png in ("intervals.png", "per_seed.png", "val_vs_test.png"):
        assert (tmp_path / "p" / png).stat().st_size > 1000
    with pytest.raises(SystemExit) as e:
        protocol.main([str(tmp_path / "m"), "--reference", "seed"])
    assert e.value.code == 2 and "--reference seed" in capsys.readouterr().err
