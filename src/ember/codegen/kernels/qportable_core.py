"""The core of the portable int8 kernels (codegen/kernels/quantized_portable.py): their C,
printed once per program as the kernels' preamble, and the Python that prepares their
constants at compile time (weight rows, requantization parameters).

Made for CPUs without x86's VNNI, microcontrollers first: the main loop is integer only, the
weights are stored once as int8 rows with no padding beyond a multiple of 4, and the scratch is
one row of int16 and the row's int32 dot products.

Dot products. A row of A (or one output pixel's im2col taps) is centered once into int16,
ac = a - a_zero (0 in the padding), so sum_k (a - za)(b - zb) = sum_k ac * w - beta * sum_k ac
with w = B as int8 (uint8 B flipped by -128: w = b - 128) and beta = zb - flip. Each column of B
is a row of w, its groups of 4 bytes stored as w0 w2 w1 w3: on Armv7E-M (Cortex-M4/M7, the DSP
extension) SXTB16 of a word gives (w0, w1) and of the word rotated by 8 (w2, w3), which SMLAD
multiplies with the pairs (a0, a1), (a2, a3) as they lie in memory: two multiply-accumulates an
instruction. Elsewhere the same sums are a plain C loop. The sums fit int32 (K <= CAP_K).

Requantization (QLinearMatMul, QLinearConv) is defined by the interpreter, the reference:
y = clamp(rint(fl(t * m)) + y_zero), t the exact integer accumulator (bias included), m =
a_scale * b_scale / y_scale in float64, fl the float64 product rounded to nearest even, rint
half to even. A fixed-point multiplier cannot reproduce that in every case (ties are decided
by bits the float64 product rounds away), so the kernel computes it exactly without float in
all but those cases: with M = m * 2**(32+k) rounded to 32 bits (8 bytes a column with k), one
32 x 32 -> 64-bit multiply and a shift by k give z = t * m in 32.32 fixed point within
|t| / 2**(k+1) + 2 units of 2**-32; when z is farther than that from a tie of the rounding,
rint(fl(t * m)) is its integer part rounded by its fraction's top bit, exactly, and an integer
part beyond +-512 saturates. Only within that margin (fewer than one accumulator in a million
in our measurements) does it compute m and fl(t * m) in double from the stored float32
scales, as the interpreter does, and round the product's bits with integers. So a core with
no floating-point unit runs QLinear* with no float at all almost always, and bit for bit
always; the common path is 32-bit operations but the one multiply (SMULL/UMULL on Cortex-M).
Imports numpy only."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

CAP_K = 33025  # 33025 * 255 * 255 < 2**31: every exact accumulator fits int32
MAX_K = 20  # M = m * 2**(32 + k): at most 52 fractional bits
REQUANT_FIELDS = 2  # per column: multiplier M, k

PQ_C = r"""
#if defined(__ARM_FEATURE_SIMD32) && defined(__GNUC__) && !defined(EMBER_PQ_PLAIN)
#include <arm_acle.h>
#define EMBER_PQ_SIMD32 1
#endif

/* One row of A (a[k * ks], k < K) centered into int16 (ac = a - z), zero-padded to K4; the
 * sum of ac. `is_signed`: A is int8 (else uint8). */
static int32_t ember_pq_center(const uint8_t *a, long ks, long K, long K4, int is_signed, int32_t z, int16_t *ac)
{
    int32_t sum = 0;
    for (long k = 0; k < K; k++) {
        int32_t v = (is_signed ? (int32_t)(int8_t)a[k * ks] : (int32_t)a[k * ks]) - z;
        ac[k] = (int16_t)v;
        sum += v;
    }
    for (long k = K; k < K4; k++) ac[k] = 0;
    return sum;
}

#ifdef EMBER_PQ_SIMD32
/* SXTB16 of w rotated right by 8: its bytes 1 and 3 sign-extended into two int16 halves. */
static inline uint32_t ember_pq_sxtb16_ror8(uint32_t w)
{
    uint32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(w));
    return r;
}
#endif

/* sum_k ac[k] * w[k] over K4 (a multiple of 4), w's groups of 4 stored as w0 w2 w1 w3. */
static int32_t ember_pq_dot(const int16_t *ac, const int8_t *w, long K4)
{
    int32_t s = 0;
#ifdef EMBER_PQ_SIMD32
    for (long k = 0; k < K4; k += 4) {
        uint32_t wv, a01, a23;
        memcpy(&wv, w + k, 4);
        memcpy(&a01, ac + k, 4);
        memcpy(&a23, ac + k + 2, 4);
        s = __smlad(__sxtb16(wv), a01, s);
        s = __smlad(ember_pq_sxtb16_ror8(wv), a23, s);
    }
#else
    for (long k = 0; k < K4; k += 4)
        s += ac[k] * w[k] + ac[k + 1] * w[k + 2] + ac[k + 2] * w[k + 1] + ac[k + 3] * w[k + 3];
#endif
    return s;
}

/* dots[j] = sum_k ac[k] * w[j * K4 + k] for the n rows of w: the main loop. With SMLAD, two
 * rows at a time share the loads of ac (8 multiply-accumulates in 12 instructions). */
static void ember_pq_dots(const int16_t *ac, const int8_t *w, long K4, long n, int32_t *dots)
{
    long j = 0;
#ifdef EMBER_PQ_SIMD32
    for (; j + 1 < n; j += 2) {
        const int8_t *w0 = w + j * K4, *w1 = w0 + K4;
        int32_t s0 = 0, s1 = 0;
        for (long k = 0; k < K4; k += 4) {
            uint32_t a01, a23, x0, x1;
            memcpy(&a01, ac + k, 4);
            memcpy(&a23, ac + k + 2, 4);
            memcpy(&x0, w0 + k, 4);
            memcpy(&x1, w1 + k, 4);
            s0 = __smlad(__sxtb16(x0), a01, s0);
            s1 = __smlad(__sxtb16(x1), a01, s1);
            s0 = __smlad(ember_pq_sxtb16_ror8(x0), a23, s0);
            s1 = __smlad(ember_pq_sxtb16_ror8(x1), a23, s1);
        }
        dots[j] = s0;
        dots[j + 1] = s1;
    }
#endif
    for (; j < n; j++) dots[j] = ember_pq_dot(ac, w + j * K4, K4);
}

/* The exact accumulator sum_k (a - za)(b - zb) = dot - beta * sum(ac), in wrapping arithmetic
 * (the true value fits int32). */
static inline int32_t ember_pq_acc(int32_t dot, int32_t beta, int32_t asum)
{
    return (int32_t)((uint32_t)dot - (uint32_t)beta * (uint32_t)asum);
}

/* rint(d) + yz clamped to [lo, hi], rounding d's bits half to even with integers; NaN gives lo. */
static int32_t ember_pq_round_bits(double d, int32_t yz, int32_t lo, int32_t hi)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    int negative = (int)(bits >> 63), e = (int)((bits >> 52) & 0x7ff);
    uint64_t mant = bits & 0xFFFFFFFFFFFFFull;
    int64_t v;
    if (e == 0x7ff) {
        if (mant) return lo;
        return negative ? lo : hi;
    }
    if (e < 1022) {
        v = 0;                                  /* |d| < 0.5 */
    } else if (e > 1023 + 40) {
        return negative ? lo : hi;              /* |d| >= 2**41: saturates */
    } else {
        uint64_t m = mant | (1ull << 52);
        int shift = 1075 - e;                   /* 12 .. 53: d = m / 2**shift */
        uint64_t r = m >> shift, rem = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        v = negative ? -(int64_t)r : (int64_t)r;
    }
    v += yz;
    return (int32_t)(v < lo ? lo : v > hi ? hi : v);
}

/* The float64 requantization, for the rare accumulators near a tie (and multipliers without
 * a fixed-point form): m = sa * sb / sy and fl(t * m) as the interpreter computes them. */
static __attribute__((noinline)) int32_t ember_pq_requant_float(int64_t t, float sa, float sb, float sy, int32_t yz,
                                                                int32_t lo, int32_t hi)
{
    double m = (double)sa * (double)sb / (double)sy;
    return ember_pq_round_bits((double)t * m, yz, lo, hi);
}

/* clamp(rint(fl(t * m)) + yz, lo, hi), t = acc + bias, exactly as the interpreter computes
 * it, for the column's fixed-point form q = {M, k} (M = m * 2**(32 + k) rounded, unsigned;
 * k < 0: none) and its scales (see qportable_core.requant_params). All 32-bit operations but
 * one multiply. */
static inline __attribute__((always_inline)) int32_t ember_pq_requant(int32_t acc, int32_t bias, const int32_t *q,
                                                                      const float *sa, const float *sb,
                                                                      const float *sy, int32_t yz, int32_t lo,
                                                                      int32_t hi)
{
    int k = q[1];
    int32_t t;
    if (k >= 0 && !__builtin_add_overflow(acc, bias, &t) && t != INT32_MIN) {
        uint64_t p = (uint64_t)((int64_t)t * (int64_t)(uint32_t)q[0]);
        uint32_t plo = (uint32_t)p, phi = (uint32_t)(p >> 32);
        /* z = p >> k (floor): t * m in 32.32 fixed point, integer part zhi, fraction zlo */
        int32_t zhi = (int32_t)phi >> k;
        uint32_t zlo = (plo >> k) | ((phi << 1) << (31 - k));
        if (zhi >= 512) return hi;              /* t * m > 511.7: saturates whatever yz */
        if (zhi < -512) return lo;
        uint32_t from_tie = zlo ^ 0x80000000u;  /* 0 at a tie of rounding to nearest */
        uint32_t margin = ((t < 0 ? 0u - (uint32_t)t : (uint32_t)t) >> (k + 1)) + 3;
        if (from_tie > margin && 0u - from_tie > margin) {
            int32_t v = zhi + (int32_t)(zlo >> 31) + yz;
            return v < lo ? lo : v > hi ? hi : v;
        }
    }
    return ember_pq_requant_float((int64_t)acc + bias, *sa, *sb, *sy, yz, lo, hi);
}
"""


def pack_rows(w: np.ndarray) -> np.ndarray:
    """Weights [N, K] (int8, or uint8 flipped by -128) as int8 rows of K4 = K rounded up to 4,
    zero-padded, each group of 4 stored as w0 w2 w1 w3 (SXTB16's order): [N * K4]."""
    n, k = w.shape
    flipped = (w.astype(np.int16) - (128 if w.dtype == np.uint8 else 0)).astype(np.int8)
    k4 = -(-k // 4) * 4
    rows = np.zeros((n, k4), np.int8)
    rows[:, :k] = flipped
    return np.ascontiguousarray(rows.reshape(n, k4 // 4, 4)[:, :, [0, 2, 1, 3]]).reshape(-1)


def unpack_rows(packed: np.ndarray, n: int, k: int) -> np.ndarray:
    """The inverse of pack_rows, as int8 [N, K] (for tests)."""
    k4 = -(-k // 4) * 4
    return packed.reshape(n, k4 // 4, 4)[:, :, [0, 2, 1, 3]].reshape(n, k4)[:, :k]


def requant_params(multipliers: np.ndarray) -> np.ndarray:
    """Per multiplier m (float64) the int32 pair ember_pq_requant reads: M = m * 2**(32 + k)
    rounded, an unsigned 32-bit value (stored as int32 bits), and k in [0, 20]: as many bits
    of m as 31 hold (32 for m in [1/4, 1)). k = -1 (the float64 product only) where m is not
    a positive finite number below 1."""
    out = np.zeros((multipliers.size, REQUANT_FIELDS), np.int64)
    out[:, 1] = -1
    for row, m in zip(out, multipliers.astype(np.float64).reshape(-1), strict=True):
        if not (math.isfinite(m) and 0 < m < 1):
            continue
        exact = Fraction(float(m))
        shift = min(max(30 - math.floor(math.log2(m)), 32), 32 + MAX_K)
        if round(exact * 2**shift) >= 2**32:  # m * 2**32 rounded up to 2**32
            continue
        multiplier = round(exact * 2**shift)
        if multiplier > 0:
            row[:] = (multiplier, shift - 32)
    return out.astype(np.uint32).view(np.int32).reshape(-1)
