"""One paired comparison of two score lists over the same requests: the one statistics routine of the package,
used by the demo ("is the test change above the noise?") and the protocol report (every method, family and seed).

`paired_comparison(reference, method)` is pure (numpy and scipy only, no files, no global state) so any
"is this change above the noise?" check can call it: `benchmarks.protocol` does for every method, family and
seed, and a single before/after check on one split can too. It returns a frozen `PairedComparison`:

* the two means and the paired difference (method - reference);
* a bootstrap interval of the mean difference (scipy.stats.bootstrap, paired, BCa; percentile when BCa
  cannot be computed; a zero-width interval when every difference is the same);
* the Wilcoxon signed-rank p-value (zero differences split; 1.0 when every difference is 0);
* Cohen's d_z (mean difference / standard deviation of the differences); None when the differences have no
  spread -- all equal, all 0 included -- where it is undefined;
* wins, ties and losses.

Below `min_pairs` paired requests the comparison is *too small*: no interval, p-value or d_z is given and it
is never significant. The default minimum is the smallest n at which a two-sided signed-rank test can reach
p < 1 - confidence at all (6 at 95%: with n = 5 even five wins out of five give p = 2/32 = 0.0625), so below it
no outcome could show a difference. A comparison is *significant* (starred in the report) when it is not too
small, its interval excludes 0 and the signed-rank test agrees (p < 1 - confidence): a bootstrap interval of a
handful of requests can exclude 0 while the rank test cannot tell the runs apart, and a star should not
depend on which of the two one reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

TOO_SMALL = "too small"
ABOVE = "above the noise"
WITHIN = "within the noise"


def smallest_testable_n(confidence: float = 0.95) -> int:
    """The least n at which an exact two-sided signed-rank test can give p < 1 - confidence (all n differences
    of one sign: p = 2 / 2**n)."""
    alpha = 1.0 - confidence
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    return max(1, math.floor(math.log2(2.0 / alpha)) + 1)


@dataclass(frozen=True)
class PairedComparison:
    """A method against a reference on the same requests (difference = method - reference)."""

    n: int
    reference_mean: float
    method_mean: float
    diff: float
    ci_low: float | None          # None when the comparison is too small
    ci_high: float | None
    p_value: float | None         # Wilcoxon signed-rank; None when too small
    effect_size: float | None     # Cohen's d_z; None when too small or the differences have no spread
    wins: int
    ties: int
    losses: int
    min_pairs: int
    confidence: float

    @property
    def too_small(self) -> bool:
        return self.n < self.min_pairs

    @property
    def significant(self) -> bool:
        if self.too_small or self.ci_low is None or self.ci_high is None or self.p_value is None:
            return False
        return (self.ci_low > 0 or self.ci_high < 0) and self.p_value < 1.0 - self.confidence

    @property
    def verdict(self) -> str:
        return TOO_SMALL if self.too_small else ABOVE if self.significant else WITHIN

    def to_dict(self) -> dict:
        from dataclasses import asdict
        return {**asdict(self), "too_small": self.too_small, "significant": self.significant,
                "verdict": self.verdict}


def paired_comparison(reference: Sequence[float], method: Sequence[float], *, confidence: float = 0.95,
                      n_resamples: int = 9999, seed: int = 0, tie_tolerance: float = 1e-9,
                      min_pairs: int | None = None) -> PairedComparison:
    """Paired statistics of `method` against `reference` (same requests, same order); see the module docstring.
    `min_pairs` defaults to `smallest_testable_n(confidence)`."""
    a, b = np.asarray(reference, dtype=float), np.asarray(method, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired scores need two equal-length lists, got {a.shape} and {b.shape}")
    n = len(a)
    if n == 0:
        raise ValueError("no paired requests: there is nothing to compare")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("paired scores must be finite numbers (a NaN or infinity was given)")
    minimum = smallest_testable_n(confidence) if min_pairs is None else int(min_pairs)
    if minimum < 1:
        raise ValueError(f"min_pairs must be at least 1, got {min_pairs}")
    d = b - a
    diff = float(d.mean())
    wins, losses = int((d > tie_tolerance).sum()), int((d < -tie_tolerance).sum())
    low = high = p = effect = None
    if n >= minimum:
        low, high = _interval(a, b, d, confidence, n_resamples, seed)
        p = _signed_rank_p(d, tie_tolerance)
        effect = _dz(d)
    return PairedComparison(n, float(a.mean()), float(b.mean()), diff, low, high, p, effect, wins,
                            n - wins - losses, losses, minimum, confidence)


def _interval(a: np.ndarray, b: np.ndarray, d: np.ndarray, confidence: float, n_resamples: int,
              seed: int) -> tuple[float, float]:
    from scipy import stats

    if len(d) < 2 or bool(np.allclose(d, d[0])):
        return float(d.mean()), float(d.mean())       # no spread: every resample has the same mean

    def mean_diff(x, y, axis=-1):
        return np.mean(y - x, axis=axis)

    kwargs = dict(paired=True, vectorized=True, confidence_level=confidence, n_resamples=n_resamples,
                  random_state=np.random.default_rng(seed))
    try:
        ci = stats.bootstrap((a, b), mean_diff, method="BCa", **kwargs).confidence_interval
        if not (math.isfinite(ci.low) and math.isfinite(ci.high)):
            raise ValueError("degenerate BCa interval")
    except (ValueError, FloatingPointError):
        ci = stats.bootstrap((a, b), mean_diff, method="percentile", **kwargs).confidence_interval
    return float(ci.low), float(ci.high)


def _signed_rank_p(d: np.ndarray, tie_tolerance: float) -> float:
    from scipy import stats

    if not np.any(np.abs(d) > tie_tolerance):
        return 1.0
    return float(stats.wilcoxon(d, zero_method="zsplit").pvalue)


def _dz(d: np.ndarray) -> float | None:
    """Cohen's d_z; undefined (None) when the differences have no spread, all 0 included."""
    if len(d) < 2 or bool(np.allclose(d, d[0])):
        return None
    return float(d.mean()) / float(d.std(ddof=1))


__all__ = ["ABOVE", "TOO_SMALL", "WITHIN", "PairedComparison", "paired_comparison", "smallest_testable_n"]
