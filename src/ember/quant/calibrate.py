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


def _kl_per_candidate(c: np.ndarray, candidates: np.ndarray, levels: int) -> np.ndarray:
    """KL(P || Q) for every candidate count of bins i, all at once from prefix sums over the
    histogram c (no loop over i): within a group of bins merged into one level, Q is the group's
    mean count on each occupied bin, so the group's terms sum to S - C log(mean) - C log(T) +
    C log(K) with C, S the group's sums of c and c log c, T the total and K the kept count. Q's
    empty bins get _SMOOTHING of the mass (the occupied ones the rest); the last kept bin also
    holds everything beyond it in P (the clipped values), a correction of its own term."""
    total = c.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        c_log_c = np.where(c > 0, c * np.log(np.where(c > 0, c, 1.0)), 0.0)
    prefix_c = np.concatenate([[0.0], np.cumsum(c)])
    prefix_occupied = np.concatenate([[0.0], np.cumsum(c > 0)])
    prefix_clogc = np.concatenate([[0.0], np.cumsum(c_log_c)])
    i = candidates[:, None]
    bounds = (np.arange(levels + 1)[None, :] * i + levels - 1) // levels  # group g: bins [b_g, b_g+1)
    count = np.diff(prefix_c[bounds], axis=1)
    occupied = np.diff(prefix_occupied[bounds], axis=1)
    clogc = np.diff(prefix_clogc[bounds], axis=1)
    kept = prefix_c[candidates]
    empty = candidates - prefix_occupied[candidates]
    keep_share = np.where(empty > 0, 1.0 - _SMOOTHING, 1.0)  # the occupied bins' share of Q
    with np.errstate(divide="ignore", invalid="ignore"):
        log_q_scale = np.log(keep_share / kept)[:, None]  # q_j = mean_g * keep_share / K
        mean = np.where(occupied > 0, count / np.where(occupied > 0, occupied, 1.0), 1.0)
        base = np.where(count > 0, clogc - count * (np.log(total) + np.log(mean) + log_q_scale), 0.0).sum(axis=1)
        last = c[candidates - 1]
        beyond = total - kept
        last_mean = mean[:, -1]
        q_last = np.where(last > 0, last_mean * keep_share / kept, _SMOOTHING / np.maximum(empty, 1.0))
        as_kept = np.where(last > 0, last * np.log(last / total / q_last), 0.0)
        as_clipped = (last + beyond) * np.log((last + beyond) / total / q_last)
        kl = (base + np.where(beyond > 0, as_clipped - as_kept, 0.0)) / total
    return np.where(kept > 0, kl, np.inf)


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
    candidates = np.arange(min(first, n), n + 1)
    return int(candidates[int(np.argmin(_kl_per_candidate(c, candidates, levels)))])


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
