"""The channels-last depthwise convolution that generated kernels call (the InvertedResidual
block's middle stage, and FusedConv's channels-last form): C text defined once per program,
and the weights in the layout it reads.

Each 16 channels of an output pixel are one vector: every multiply-add reads one input vector
of 16 channels and one of the tap's 16 weights, aligned to whole lines, with none of the lane
waste or unaligned row loads of the NCHW kernel (ember_depthwise.c) on narrow maps. Four
output pixels of a row go together (eight chains of multiply-adds: two per pixel, each tap's
weights loaded once for the four) wherever their taps' columns lie inside the input; kernel
rows in the top or bottom padding are skipped, not multiplied by zeros, so the short maps of
text recognizers (3x40 with 5x5 taps: 40% of the taps in the padding) do not pay for them.
The activation runs over each stored row segment afterwards. Loop order and chunking: see
ember_depthwise_nhwc_block."""
from __future__ import annotations

import numpy as np

DEPTHWISE_NHWC = "ember_depthwise_nhwc"
LANES = 16

DEPTHWISE_NHWC_C = r"""
/* Depthwise convolution of channels-last e [H][W][C] into d [OH][OW][C] (C a multiple of 16),
 * 16 channels a vector. KH, KW, SH and SW are constants where the caller specializes. */
typedef float ember_dn_v16 __attribute__((vector_size(64)));
typedef int ember_dn_i16 __attribute__((vector_size(64)));
static inline ember_dn_v16 ember_dn_load(const float *p) { ember_dn_v16 v; memcpy(&v, p, sizeof v); return v; }
/* `bound` where `past` says so, else v (a NaN in v stays, as in np.maximum / np.minimum). */
static inline ember_dn_v16 ember_dn_pick(ember_dn_i16 past, ember_dn_v16 bound, ember_dn_v16 v)
{
    return (ember_dn_v16)(((ember_dn_i16)bound & past) | ((ember_dn_i16)v & ~past));
}
/* The activation on channels [c_lo, c_hi) of n output pixels C floats apart, once a row
 * segment is stored: one loop per activation, so the multiply-add loops carry no branch on it
 * (applied per vector there, a 3x3 layer ran 10-20% slower, its accumulators spilled). */
static void ember_dn_activate(float *d, long n, long C, long c_lo, long c_hi, const ember_epilogue *ep)
{
    ember_dn_v16 zero = {0}, one = zero + 1.0f, lo = zero + ep->alpha, hi = zero + ep->beta;
    #define EMBER_DN_EACH(expr) \
        for (long p = 0; p < n; p++) \
            for (long c = c_lo; c < c_hi; c += 16) { \
                ember_dn_v16 v = ember_dn_load(d + p * C + c), out = (expr); \
                memcpy(d + p * C + c, &out, sizeof out); \
            }
    switch (ep->act) {
    case EMBER_ACT_NONE: return;
    case EMBER_ACT_RELU: EMBER_DN_EACH(ember_dn_pick(zero > v, zero, v)) return;
    case EMBER_ACT_CLIP: EMBER_DN_EACH(ember_dn_pick(hi < v, hi, ember_dn_pick(lo > v, lo, v))) return;
    case EMBER_ACT_HARD_SWISH:
        EMBER_DN_EACH(lo * (v * ember_dn_pick(v * (1.0f / 6.0f) + 0.5f > one, one,
                                              ember_dn_pick(v * (1.0f / 6.0f) + 0.5f < zero, zero,
                                                            v * (1.0f / 6.0f) + 0.5f))) + hi)
        return;
    default:
        for (long p = 0; p < n; p++)
            for (long c = c_lo; c < c_hi; c++) d[p * C + c] = ember_activate(d[p * C + c], ep);
    }
    #undef EMBER_DN_EACH
}
/* Channels [c0, c0 + 16) of output pixels [j0, j0 + 4) of row i, every tap's column inside
 * the input (kernel rows outside it skipped): four pixels at a time so that eight chains of
 * multiply-adds (two per pixel) cover the FMA latency, each tap's weights loaded once for the
 * four. */
static inline __attribute__((always_inline)) void
ember_dn_four(const float *e, long ldE, long H, long W, const float *wt, ember_dn_v16 b, float *d, long C,
              const long KH, const long KW, const long SW, long ih0, long iw0, long at)
{
    ember_dn_v16 zero = {0}, acc[4][2];
    for (int q = 0; q < 4; q++) { acc[q][0] = b; acc[q][1] = zero; }
    #pragma GCC unroll 8
    for (long u = 0; u < KH; u++) {
        if (ih0 + u < 0 || ih0 + u >= H) continue;
        const float *row = e + ((ih0 + u) * W + iw0) * ldE;
        #pragma GCC unroll 8
        for (long v = 0; v < KW; v++) {
            ember_dn_v16 w = ember_dn_load(wt + (u * KW + v) * C);
            #pragma GCC unroll 4
            for (int q = 0; q < 4; q++) acc[q][u % 2] += w * ember_dn_load(row + (q * SW + v) * ldE);
        }
    }
    for (int q = 0; q < 4; q++) {
        ember_dn_v16 out = acc[q][0] + acc[q][1];
        memcpy(d + (at + q) * C, &out, sizeof out);
    }
}
/* Channels [c0, c0 + 16) of one output pixel, taps outside the input skipped. */
static inline void ember_dn_one(const float *e, long ldE, long H, long W, const float *wt, ember_dn_v16 b, float *d,
                                long C, long KH, long KW, long ih0, long iw0, long at)
{
    ember_dn_v16 acc = b;
    for (long u = 0; u < KH; u++) {
        if (ih0 + u < 0 || ih0 + u >= H) continue;
        for (long v = 0; v < KW; v++)
            if (iw0 + v >= 0 && iw0 + v < W)
                acc += ember_dn_load(wt + (u * KW + v) * C) * ember_dn_load(e + ((ih0 + u) * W + iw0 + v) * ldE);
    }
    memcpy(d + at * C, &acc, sizeof acc);
}
/* Channels [c_lo, c_hi) of output pixels [q0, q1): EMBER_DN_CHUNK channels at a time, row by
 * row and pixel by pixel, all of a pixel's chunk before the next pixel, so that the reads run
 * through whole lines in order and the chunk's weights stay in L1. Taking 16 channels over the
 * whole map at a time instead (each tap's weights in registers) ran a 64-channel 3x3 layer 1.5x
 * slower: with 256-byte pixels a pass touches a quarter of the L1's sets, and thrashes them;
 * all of 480 channels a pixel ran a 5x5 layer 1.2x slower, its 48 KB of weights filling
 * the L1 (Xeon). */
#define EMBER_DN_CHUNK 64
static inline __attribute__((always_inline)) void
ember_depthwise_nhwc_block(const float *e, long ldE, long H, long W, long C, const float *wt, const float *bias,
                           float *d, long OW, const long KH, const long KW, const long SH, const long SW, long PH,
                           long PW, const ember_epilogue *ep, long c_lo, long c_hi, long q0, long q1)
{
    ember_dn_v16 zero = {0};
    /* Output columns [j_lo, j_hi) have every tap's column inside the row. */
    long j_lo = (PW + SW - 1) / SW, j_hi = W - KW + PW >= 0 ? (W - KW + PW) / SW + 1 : 0;
    if (j_hi > OW) j_hi = OW;
    if (j_lo > j_hi) j_lo = j_hi;
    /* Output pixels [q0, q1): whole rows, and a part row at either end; EMBER_DN_CHUNK
     * channels at a time. */
    for (long cc = c_lo; cc < c_hi; cc += EMBER_DN_CHUNK)
    for (long i = q0 / OW; i * OW < q1; i++) {
        long c_end = cc + EMBER_DN_CHUNK < c_hi ? cc + EMBER_DN_CHUNK : c_hi;
        long ih0 = i * SH - PH, j = i * OW < q0 ? q0 - i * OW : 0, end = q1 - i * OW < OW ? q1 - i * OW : OW;
        long inside_lo = j_lo < end ? j_lo : end, inside_hi = j_hi < end ? j_hi : end, first = j;
        #define EMBER_DN_CHANNELS(call) \
            for (long c0 = cc; c0 < c_end; c0 += 16) { \
                ember_dn_v16 b = bias ? ember_dn_load(bias + c0) : zero; \
                call; \
            }
        for (; j < inside_lo; j++)
            EMBER_DN_CHANNELS(ember_dn_one(e + c0, ldE, H, W, wt + c0, b, d + c0, C, KH, KW, ih0, j * SW - PW,
                                           i * OW + j))
        for (; j + 4 <= inside_hi; j += 4)
            EMBER_DN_CHANNELS(ember_dn_four(e + c0, ldE, H, W, wt + c0, b, d + c0, C, KH, KW, SW, ih0, j * SW - PW,
                                            i * OW + j))
        for (; j < end; j++)
            EMBER_DN_CHANNELS(ember_dn_one(e + c0, ldE, H, W, wt + c0, b, d + c0, C, KH, KW, ih0, j * SW - PW,
                                           i * OW + j))
        #undef EMBER_DN_CHANNELS
        ember_dn_activate(d + (i * OW + first) * C, end - first, C, cc, c_end, ep);
    }
}
#define EMBER_DN_CASE(kh, kw, sh, sw) \
    if (KH == kh && KW == kw && SH == sh && SW == sw) { \
        ember_depthwise_nhwc_block(e, ldE, H, W, C, wt, bias, d, OW, kh, kw, sh, sw, PH, PW, ep, c_lo, c_hi, q0, q1); \
        return; \
    }
/* e: [H][W] pixels ldE floats apart, its first C channels read; d: [OH][OW][C]; wt: [taps][C].
 * Channels [c_lo, c_hi) (multiples of 16) of output pixels [q0, q1): one task's share. 3x3 and
 * 5x5 taps get copies specialised to strides of 1 and 2 each way (MobileNets' equal ones, text
 * recognisers' 2x1 and 1x2); the rest one general copy. */
static void ember_depthwise_nhwc(const float *e, long ldE, long H, long W, long C, const float *wt, const float *bias,
                                 float *d, long OW, long KH, long KW, long SH, long SW, long PH, long PW,
                                 const ember_epilogue *ep, long c_lo, long c_hi, long q0, long q1)
{
    EMBER_DN_CASE(3, 3, 1, 1)
    EMBER_DN_CASE(3, 3, 2, 2)
    EMBER_DN_CASE(3, 3, 2, 1)
    EMBER_DN_CASE(3, 3, 1, 2)
    EMBER_DN_CASE(5, 5, 1, 1)
    EMBER_DN_CASE(5, 5, 2, 2)
    EMBER_DN_CASE(5, 5, 2, 1)
    EMBER_DN_CASE(5, 5, 1, 2)
    ember_depthwise_nhwc_block(e, ldE, H, W, C, wt, bias, d, OW, KH, KW, SH, SW, PH, PW, ep, c_lo, c_hi, q0, q1);
}
#undef EMBER_DN_CASE
"""


def depthwise_taps(weights: np.ndarray) -> np.ndarray:
    """Depthwise weights [C, 1, kh, kw] as the kernel reads them: [kh * kw][C], float32."""
    channels = weights.shape[0]
    return np.ascontiguousarray(weights.reshape(channels, -1).T.astype(np.float32))


__all__ = ["DEPTHWISE_NHWC", "DEPTHWISE_NHWC_C", "LANES", "depthwise_taps"]
