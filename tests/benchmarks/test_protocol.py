"""dspy_adaptive.record.paired / benchmarks.protocol: paired statistics checked against scipy and hand-computed
cases, and run labels. (The same on real run directories: tests/bench_run/test_gain_walkthrough.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from benchmarks import protocol
from benchmarks.protocol import POOLED, Run, compare_methods, find_runs, selection_gaps
from dspy_adaptive.record.paired import paired_comparison, smallest_testable_n


def test_hand_computed_case():
    ref = [0.0, 0.0, 1.0, 1.0, 0.5]
    new = [1.0, 0.0, 1.0, 0.0, 1.0]
    s = paired_comparison(ref, new, min_pairs=1)
    d = np.array(new) - np.array(ref)          # [1, 0, 0, -1, 0.5]
    assert s.n == 5 and s.reference_mean == pytest.approx(0.5) and s.method_mean == pytest.approx(0.6)
    assert s.diff == pytest.approx(0.1)
    assert (s.wins, s.ties, s.losses) == (2, 2, 1)
    assert s.effect_size == pytest.approx(0.1 / d.std(ddof=1))
    assert s.p_value == pytest.approx(stats.wilcoxon(d, zero_method="zsplit").pvalue)
    assert s.ci_low < 0.1 < s.ci_high and not s.significant and s.verdict == "within the noise"
    default = paired_comparison(ref, new)       # 5 pairs are below the default minimum of 6
    assert default.too_small and default.verdict == "too small" and not default.significant
    assert (default.ci_low, default.ci_high, default.p_value, default.effect_size) == (None, None, None, None)
    assert (default.diff, default.wins, default.ties, default.losses) == (s.diff, 2, 2, 1)


def test_interval_matches_scipy_bootstrap_on_the_differences():
    rng = np.random.default_rng(1)
    ref = rng.uniform(size=60)
    new = np.clip(ref + rng.normal(0.15, 0.1, size=60), 0, 1)
    s = paired_comparison(ref, new, n_resamples=4999, seed=7)
    expected = stats.bootstrap((new - ref,), np.mean, n_resamples=4999, method="BCa",
                               random_state=np.random.default_rng(7)).confidence_interval
    assert s.ci_low == pytest.approx(expected.low, abs=0.01) and s.ci_high == pytest.approx(expected.high, abs=0.01)
    assert s.significant and s.p_value < 0.001 and s.wins > s.losses and s.verdict == "above the noise"
    assert paired_comparison(ref, new, n_resamples=4999, seed=7) == s          # pure: same input, same record


def test_identical_scores_are_a_tie_with_p_one_and_no_effect_size():
    s = paired_comparison([0.2, 0.4, 1.0, 0.0, 0.5, 0.5], [0.2, 0.4, 1.0, 0.0, 0.5, 0.5])
    assert (s.diff, s.ci_low, s.ci_high, s.p_value) == (0.0, 0.0, 0.0, 1.0)
    assert s.effect_size is None                     # d_z = 0 / 0: undefined, as for any constant difference
    assert (s.wins, s.ties, s.losses) == (0, 6, 0) and not s.significant


def test_constant_shift_has_a_degenerate_interval_and_no_effect_size():
    s = paired_comparison([0.0, 0.5, 0.2, 0.3, 0.1, 0.0], [0.1, 0.6, 0.3, 0.4, 0.2, 0.1])
    assert s.ci_low == pytest.approx(0.1) and s.ci_high == pytest.approx(0.1)
    assert s.p_value == pytest.approx(2 / 64) and s.significant      # six wins of six
    assert s.effect_size is None                     # d_z is undefined with no spread, not 0
    short = paired_comparison([0.0, 0.5, 0.2], [0.1, 0.6, 0.3], min_pairs=1)
    assert short.ci_low == pytest.approx(0.1) and short.p_value == pytest.approx(0.25)
    assert not short.significant                     # the interval excludes 0 but the rank test cannot agree


def test_one_pair_is_too_small_not_significant():
    s = paired_comparison([0.0], [1.0])
    assert s.too_small and not s.significant and s.ci_low is None and s.p_value is None and s.wins == 1
    forced = paired_comparison([0.0], [1.0], min_pairs=1)         # the case: [1, 1] with p = 1.0
    assert (forced.ci_low, forced.ci_high, forced.p_value) == (1.0, 1.0, 1.0) and not forced.significant


@pytest.mark.parametrize("confidence, n", [(0.95, 6), (0.99, 8), (0.9, 5)])
def test_the_default_minimum_is_the_fewest_pairs_a_signed_rank_test_can_call(confidence, n):
    assert smallest_testable_n(confidence) == n
    alpha = 1 - confidence
    assert stats.wilcoxon(np.ones(n)).pvalue < alpha <= stats.wilcoxon(np.ones(n - 1)).pvalue
    assert paired_comparison([0.0] * n, [1.0] * n, confidence=confidence).significant
    assert paired_comparison([0.0] * (n - 1), [1.0] * (n - 1), confidence=confidence).too_small


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="equal-length"):
        paired_comparison([1.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="no paired"):
        paired_comparison([], [])
    with pytest.raises(ValueError, match="finite"):
        paired_comparison([1.0, float("nan")], [1.0, 0.0])


def test_labels_name_what_differs_and_leave_defaults_out():
    defaults = {"budget": 18000, "feedback": "decomposed", "max_specialists": 5, "selection_split": 0,
                "finalists": 3, "selection_rollouts": 1, "sizes": "paper"}
    base = {"budget": 60, "max_specialists": 5, "sizes": "paper"}

    def run(path, seed, **cfg):
        return Run(path, "adaptive", seed, {}, {}, None, {**base, **cfg})

    runs = protocol.label_runs([run("a", 0), run("a", 1), run("s", 0, feedback="scalar"),
                                run("sel", 0, selection=[5, 3, 1]), run("k", 0, max_specialists=3, budget=90),
                                run("z", 0, sizes={"qa": [3, 3, 3], "math": [3, 3, 3]})], defaults)
    assert [r.label for r in runs] == ["adaptive[budget=60]", "adaptive[budget=60]",
                                       "adaptive[budget=60,feedback=scalar]",
                                       "adaptive[budget=60,selection_split=5]",
                                       "adaptive[budget=90,max_specialists=3]",
                                       "adaptive[budget=60,sizes=3,3,3]"]
    assert protocol.label_runs([run("a", 0), run("s", 0, feedback="scalar")], defaults)[0].label == "adaptive"
    named = protocol.label_runs([Run("n", "adaptive", 0, {}, {}, None, base, name="mine"), run("a", 0)], defaults)
    assert [r.label for r in named] == ["mine", "adaptive"]
    with pytest.raises(ValueError, match="NAME=RUN_DIR"):
        protocol.label_runs([run("a", 0), run("b", 0)], defaults)              # one configuration, one seed, twice
    with pytest.raises(ValueError, match="differ"):
        protocol.label_runs([Run("x", "adaptive", 0, {}, {}, None, base, name="same"),
                             Run("y", "adaptive", 1, {}, {}, None, {**base, "budget": 5}, name="same")], defaults)


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
