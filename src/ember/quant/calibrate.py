"""Calibration methods: a profiled tensor's statistics -> the range [lo, hi] to quantize.

    minmax      the whole observed range
    percentile  the |x| bound holding `percentile` % of the values (an outlier clipped)
    entropy     the |x| threshold whose quantized distribution loses least information, by
                Kullback-Leibler divergence over the histogram (TensorRT's calibration, from
                Migacz's "8-bit Inference with TensorRT", GTC 2017): for each candidate of i bins
                (from the number of quantization levels up to the whole histogram) the reference
                P is the first i bins with everything beyond folded into the last; Q merges the
                same i bins into `levels` groups and spreads each group's count evenly over its
                non-empty bins; the threshold is the i with the least KL(P || Q). The zero bin
                takes its neighbour's count first (the Relu spike at 0, as NVIDIA's calibrator
                does), levels are 128 on |x| (256 for a never-negative tensor in uint8), and
                no threshold clipping more than 1% of the values is considered.

All work on the folded |x| histogram of TensorStats (BINS / 2 bins over [0, amax]). The bound
applies to both sides and never widens the observed range: [max(lo, -T), min(hi, T)].

May import types and support/ (and quant's own modules)."""
from __future__ import annotations

import numpy as np

from ember.quant.profile import BINS, TensorStats
from ember.support.errors import EmberError

METHODS = ("minmax", "percentile", "entropy")
_SMOOTHING = 1e-4  # the mass Q gives its empty bins, so KL(P || Q) stays finite
MAX_CLIPPED = 0.01  # the most of a tensor's values the entropy threshold may clip


def folded_histogram(stats: TensorStats) -> np.ndarray:
    """Counts of |x| in BINS // 2 equal bins over [0, amax]."""
    half = BINS // 2
    return stats.hist[half:] + stats.hist[:half][::-1]


def _kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    p = p / p.sum()
    q_total = q.sum()
    if q_total <= 0:
        return float("inf")
    q = q / q_total
    empty = q == 0
    if empty.any():
        q = (1.0 - _SMOOTHING) * q + _SMOOTHING * empty / empty.sum()
    present = p > 0
    return float(np.sum(p[present] * np.log(p[present] / q[present])))


def entropy_bins(counts: np.ndarray, levels: int = 128) -> int:
    """How many leading bins of the |x| histogram `counts` to keep (TensorRT's KL search)."""
    c = counts.astype(np.float64)
    n = c.size
    total = c.sum()
    if n <= levels or total == 0:
        return n
    # Never clip more than MAX_CLIPPED of the values: KL is a measure for smooth distributions,
    # and on a few discrete values (an image input of 17 grey levels) a threshold that folds all
    # the mass beyond it onto one spike matches Q exactly (KL 0) while clipping most values.
    first = max(levels, int(np.searchsorted(np.cumsum(c), total * (1.0 - MAX_CLIPPED))) + 1)
    # The spike of exact zeros (half of every Relu output) would dominate the merged first
    # level and push the threshold down: NVIDIA's calibrator flattens it the same way.
    c[0] = c[1]
    if c.sum() == 0:
        return n
    tail = np.concatenate([np.cumsum(c[::-1])[::-1], [0.0]])  # tail[i]: the count beyond bin i - 1
    best, best_bins = float("inf"), n
    for i in range(min(first, n), n + 1):
        kept = c[:i]
        p = kept.copy()
        p[-1] += tail[i]
        if p.sum() == 0:
            continue
        groups = np.arange(i) * levels // i  # `levels` groups of near-equal width
        occupied = kept > 0
        group_count = np.bincount(groups, weights=kept, minlength=levels)
        group_occupied = np.bincount(groups, weights=occupied, minlength=levels)
        q = np.where(occupied, group_count[groups] / np.maximum(group_occupied[groups], 1.0), 0.0)
        kl = _kl_divergence(p, q)
        if kl < best:
            best, best_bins = kl, i
    return best_bins


def activation_range(stats: TensorStats, method: str = "minmax", percentile: float = 99.99,
                     levels: int = 128) -> tuple[float, float]:
    """The range to quantize a profiled tensor over (`levels`: quantization levels on the |x|
    side, for the entropy method; Schema.levels gives it)."""
    if method not in METHODS:
        raise EmberError(f"unknown calibration method '{method}' (known: {', '.join(METHODS)})")
    if method == "minmax":
        return stats.min, stats.max
    half = BINS // 2
    counts = folded_histogram(stats)
    total = counts.sum()
    if total == 0 or stats.amax == 0:
        return stats.min, stats.max
    if method == "percentile":
        if not 0.0 < percentile <= 100.0:
            raise EmberError(f"percentile {percentile}: give a percentage in (0, 100]")
        bins = int(np.searchsorted(np.cumsum(counts), total * percentile / 100.0)) + 1
    else:
        bins = entropy_bins(counts, levels)
    bound = stats.amax * min(bins, half) / half
    return max(stats.min, -bound), min(stats.max, bound)
