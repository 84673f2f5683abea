"""qconv_direct: QLinearConv without im2col, for the common form (2-D, one group, no dilation,
symmetric int8 weights, constant parameters). Tried before qconv_im2col (quantized.py).

The input is copied once per image into phase planes (one per stride phase, as the float
conv_direct does), each in groups of 4 channels interleaved per pixel ([phase][C/4][pos][4]),
with the zero point in the padding. On a grid of Wph columns per output row (a few more than
the output's), the 4 bytes of one k group (4 channels of one tap) of 64 consecutive grid
positions are then 256 contiguous bytes at a fixed offset per k group from the block's start:
the GEMM reads the planes in place through an offset table, 4 vectors per k group, and
multiplies them by 6 output channels' broadcast weights (vpdpbusd, u8 x s8 -> s32). Tiles are
6 output channels x 64 grid positions, so each output row is stored contiguously in NCHW (the
grid's extra columns are dropped).

Exactly the interpreter's QLinearConv: acc + bias = sum (x - zx) w + bias, in int32 as
sum x w + (bias - zx sum w) (one correction per channel, computed at compile time; a bias
that could overflow int32 leaves the convolution to qconv_im2col), times
x_scale * w_scale / y_scale (float64, as the interpreter divides), clamped to the output's
range less its zero point, rounded half to even, plus the zero point. int8 inputs are flipped
to uint8 (x + 128, the zero point with them) as the planes are built."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.codegen.c_types import c_type
from ember.codegen.c_writer import CWriter
from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.layouts import threads_for
from ember.codegen.kernels.qgemm_core import QMR, QNR, pack_qpanels
from ember.codegen.kernels.registry import Kernel, KernelOptions, KernelPlan, OpView, is_whole_weight
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Buffer, Instr
from ember.support.errors import EmberError
from ember.types import DType

QDC_MR, QDC_NR = 6, 64  # mirror EMBER_QDC_MR / EMBER_QDC_NR
MAX_K = 65000  # 65000 * 255 * 128 < 2**31: sum (x - zx) w fits int32

QDC_C = r"""
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#define EMBER_QDC_MR 6
#define EMBER_QDC_NR 64
#define EMBER_QDC_ROWS 6

/* The first mr (a constant where inlined) rows of an EMBER_QDC_MR x 64 tile:
 * tile[r][j] = sum_g sum_t act[koff[g] + 4 j + t] * w[g][r][t]. */
static inline __attribute__((always_inline)) void ember_qdc_tile_n(const uint8_t *act, const int64_t *koff,
                                                                  long groups, const int8_t *w, int32_t *tile,
                                                                  const int mr)
{
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__GNUC__)
    /* Named accumulators stay in registers; vpdpbusd as inline asm (see qgemm_core.py). */
#define EMBER_QDC_DP(acc, a, b) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b))
#define EMBER_QDC_ACC(r) \
    __m512i c##r##0 = _mm512_setzero_si512(), c##r##1 = c##r##0, c##r##2 = c##r##0, c##r##3 = c##r##0
    EMBER_QDC_ACC(0); EMBER_QDC_ACC(1); EMBER_QDC_ACC(2); EMBER_QDC_ACC(3); EMBER_QDC_ACC(4); EMBER_QDC_ACC(5);
#define EMBER_QDC_ROW(r)                                                                      \
    if (mr > (r)) {                                                                           \
        int32_t wv; memcpy(&wv, wg + 4 * (r), 4);                                             \
        __m512i wb = _mm512_set1_epi32(wv);                                                   \
        EMBER_QDC_DP(c##r##0, a0, wb); EMBER_QDC_DP(c##r##1, a1, wb);                         \
        EMBER_QDC_DP(c##r##2, a2, wb); EMBER_QDC_DP(c##r##3, a3, wb);                         \
    }
    for (long g = 0; g < groups; g++) {
        const uint8_t *p = act + koff[g];
        const int8_t *wg = w + g * 4 * EMBER_QDC_MR;
        __m512i a0 = _mm512_loadu_si512(p), a1 = _mm512_loadu_si512(p + 64);
        __m512i a2 = _mm512_loadu_si512(p + 128), a3 = _mm512_loadu_si512(p + 192);
        EMBER_QDC_ROW(0) EMBER_QDC_ROW(1) EMBER_QDC_ROW(2) EMBER_QDC_ROW(3) EMBER_QDC_ROW(4) EMBER_QDC_ROW(5)
    }
#define EMBER_QDC_PUT(r)                                                                      \
    if (mr > (r)) {                                                                           \
        _mm512_storeu_si512(tile + (r) * 64, c##r##0); _mm512_storeu_si512(tile + (r) * 64 + 16, c##r##1); \
        _mm512_storeu_si512(tile + (r) * 64 + 32, c##r##2); _mm512_storeu_si512(tile + (r) * 64 + 48, c##r##3); \
    }
    EMBER_QDC_PUT(0) EMBER_QDC_PUT(1) EMBER_QDC_PUT(2) EMBER_QDC_PUT(3) EMBER_QDC_PUT(4) EMBER_QDC_PUT(5)
#undef EMBER_QDC_DP
#undef EMBER_QDC_ACC
#undef EMBER_QDC_ROW
#undef EMBER_QDC_PUT
#else
    for (int x = 0; x < mr * 64; x++) tile[x] = 0;
    for (long g = 0; g < groups; g++) {
        const uint8_t *p = act + koff[g];
        const int8_t *wg = w + g * 4 * EMBER_QDC_MR;
        for (int r = 0; r < mr; r++) {
            int32_t w0 = wg[4 * r], w1 = wg[4 * r + 1], w2 = wg[4 * r + 2], w3 = wg[4 * r + 3];
            int32_t *t = tile + r * 64;
            for (int j = 0; j < 64; j++)
                t[j] += p[4 * j] * w0 + p[4 * j + 1] * w1 + p[4 * j + 2] * w2 + p[4 * j + 3] * w3;
        }
    }
#endif
}

/* The first mr output channels of a tile (the rest are not written): a last block of fewer
 * than 6 channels (64 = 10 x 6 + 4) costs its own rows, not 6. */
static void ember_qdc_tile(const uint8_t *act, const int64_t *koff, long groups, const int8_t *w, int32_t *tile,
                           long mr)
{
    switch (mr) {
    case 1: ember_qdc_tile_n(act, koff, groups, w, tile, 1); break;
    case 2: ember_qdc_tile_n(act, koff, groups, w, tile, 2); break;
    case 3: ember_qdc_tile_n(act, koff, groups, w, tile, 3); break;
    case 4: ember_qdc_tile_n(act, koff, groups, w, tile, 4); break;
    case 5: ember_qdc_tile_n(act, koff, groups, w, tile, 5); break;
    default: ember_qdc_tile_n(act, koff, groups, w, tile, EMBER_QDC_MR); break;
    }
}

/* The first mr (a constant where inlined) rows of an EMBER_QDC_ROWS x 64 tile of a
 * convolution read in place through phase planes of 4-channel words (qconv_rows): row r (an
 * output pixel) takes its k group q from rows[r] + koff[q], rows[r] being the pixel's place in
 * the planes. No im2col: the row's words are broadcast straight from the planes. */
static inline __attribute__((always_inline)) void ember_qdc_rowtile_n(const uint8_t *const *rows, const int64_t *koff,
                                                                     long groups, const int8_t *bp, int32_t *tile,
                                                                     const int mr)
{
#if defined(__AVX512VNNI__) && defined(__GNUC__)
#define EMBER_DPBUSD(acc, a, b) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b))
#define EMBER_QACC(r) __m512i c##r##0 = _mm512_setzero_si512(), c##r##1 = c##r##0, c##r##2 = c##r##0, c##r##3 = c##r##0
    EMBER_QACC(0); EMBER_QACC(1); EMBER_QACC(2); EMBER_QACC(3); EMBER_QACC(4); EMBER_QACC(5);
    const uint8_t *row0 = rows[0], *row1 = rows[mr > 1], *row2 = rows[mr > 2 ? 2 : 0], *row3 = rows[mr > 3 ? 3 : 0];
    const uint8_t *row4 = rows[mr > 4 ? 4 : 0], *row5 = rows[mr > 5 ? 5 : 0];
#define EMBER_QROW(r)                                                                         \
    if (mr > (r)) {                                                                           \
        int32_t w_; memcpy(&w_, row##r + k, 4);                                               \
        __m512i av = _mm512_set1_epi32(w_);                                                   \
        EMBER_DPBUSD(c##r##0, av, b0); EMBER_DPBUSD(c##r##1, av, b1);                         \
        EMBER_DPBUSD(c##r##2, av, b2); EMBER_DPBUSD(c##r##3, av, b3);                         \
    }
    for (long q = 0; q < groups; q++) {
        const int8_t *b = bp + q * 4 * EMBER_QDC_NR;
        long k = (long)koff[q];
        __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 64);
        __m512i b2 = _mm512_loadu_si512(b + 128), b3 = _mm512_loadu_si512(b + 192);
        EMBER_QROW(0) EMBER_QROW(1) EMBER_QROW(2) EMBER_QROW(3) EMBER_QROW(4) EMBER_QROW(5)
    }
#define EMBER_QPUT(r)                                                                         \
    if (mr > (r)) {                                                                           \
        _mm512_storeu_si512(tile + (r) * EMBER_QDC_NR, c##r##0);                                 \
        _mm512_storeu_si512(tile + (r) * EMBER_QDC_NR + 16, c##r##1);                            \
        _mm512_storeu_si512(tile + (r) * EMBER_QDC_NR + 32, c##r##2);                            \
        _mm512_storeu_si512(tile + (r) * EMBER_QDC_NR + 48, c##r##3);                            \
    }
    EMBER_QPUT(0) EMBER_QPUT(1) EMBER_QPUT(2) EMBER_QPUT(3) EMBER_QPUT(4) EMBER_QPUT(5)
#undef EMBER_QACC
#undef EMBER_DPBUSD
#undef EMBER_QROW
#undef EMBER_QPUT
#else
    for (int r = 0; r < mr; r++) {
        int32_t *t = tile + r * EMBER_QDC_NR;
        for (int c = 0; c < EMBER_QDC_NR; c++) t[c] = 0;
        for (long q = 0; q < groups; q++) {
            const int8_t *b = bp + q * 4 * EMBER_QDC_NR;
            const uint8_t *a4 = rows[r] + koff[q];
            int32_t a0 = a4[0], a1 = a4[1], a2 = a4[2], a3 = a4[3];
            for (int c = 0; c < EMBER_QDC_NR; c++)
                t[c] += a0 * b[4 * c] + a1 * b[4 * c + 1] + a2 * b[4 * c + 2] + a3 * b[4 * c + 3];
        }
    }
#endif
}

/* The first mr rows of a qconv_rows tile (the rest are not written): a last block of a few
 * pixels (7x7 maps: 49 = 8 x 6 + 1) costs its own rows, not 6. */
static void ember_qdc_rowtile(const uint8_t *const *rows, const int64_t *koff, long groups, const int8_t *bp,
                              int32_t *tile, long mr)
{
    switch (mr) {
    case 1: ember_qdc_rowtile_n(rows, koff, groups, bp, tile, 1); break;
    case 2: ember_qdc_rowtile_n(rows, koff, groups, bp, tile, 2); break;
    case 3: ember_qdc_rowtile_n(rows, koff, groups, bp, tile, 3); break;
    case 4: ember_qdc_rowtile_n(rows, koff, groups, bp, tile, 4); break;
    case 5: ember_qdc_rowtile_n(rows, koff, groups, bp, tile, 5); break;
    default: ember_qdc_rowtile_n(rows, koff, groups, bp, tile, EMBER_QDC_ROWS); break;
    }
}

/* How a convolution requantizes (a constant per call): the output is int8 (else uint8); the
 * products times the multiplier may pass 2^30 (else the clamp waits for the integers). */
#define EMBER_QDC_SIGNED 1
#define EMBER_QDC_WIDE 2

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__GNUC__)
/* 16 sums (bias and zero-point correction included) requantized to 16 bytes, exactly the
 * interpreter's clamp(nearbyint(acc * mult) + zy, LO, HI), rounding half to even in the
 * float64 -> int32 conversion and adding the zero point as an integer. The clamp: the pack's
 * saturation, or, where acc * mult may not fit int32 (EMBER_QDC_WIDE), first in float64 at
 * lo = LO - zy and hi = HI - zy (integers, so it commutes with rounding). m0, m1 multiply
 * lanes 0-7 and 8-15. */
static inline __attribute__((always_inline)) __m128i ember_qdc_rq16(__m512i acc, __m512d m0, __m512d m1, __m512d lo,
                                                                   __m512d hi, __m512i zy, const int mode)
{
    __m512d d0 = _mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(acc)), m0);
    __m512d d1 = _mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(acc, 1)), m1);
    if (mode & EMBER_QDC_WIDE) {
        d0 = _mm512_min_pd(_mm512_max_pd(d0, lo), hi);
        d1 = _mm512_min_pd(_mm512_max_pd(d1, lo), hi);
    }
    __m256i i0 = _mm512_cvt_roundpd_epi32(d0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i i1 = _mm512_cvt_roundpd_epi32(d1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i q = _mm512_add_epi32(_mm512_inserti64x4(_mm512_castsi256_si512(i0), i1, 1), zy);
    if (mode & EMBER_QDC_SIGNED)
        return _mm512_cvtsepi32_epi8(q);
    return _mm512_cvtusepi32_epi8(_mm512_max_epi32(q, _mm512_setzero_si512()));
}
#endif

/* One sum requantized as ember_qdc_rq16 does (the wrapping int32 sum of tile and correction
 * is exact: the true value fits). */
static inline uint8_t ember_qdc_rq1(int32_t t, int32_t corr, double mult, int32_t zy, double lo, double hi)
{
    double q = ((double)(int32_t)((uint32_t)t + (uint32_t)corr)) * mult;
    q = q > lo ? q : lo;
    q = q < hi ? q : hi;
    return (uint8_t)((int32_t)nearbyint(q) + zy);
}

/* A qconv_rows tile (EMBER_QDC_ROWS pixels x 64 output channels, nr of them real) requantized
 * per channel, then stored into NCHW: channel j's pixels are P bytes apart from the next
 * channel's. corr holds each channel's zero-point correction plus its bias. spill: the 2
 * bytes after each channel's 6 may be overwritten (the same thread stores them next). */
static inline __attribute__((always_inline)) void ember_qdc_colstore(const int32_t *tile, long mr, long nr,
                                                                    const int32_t *corr, const double *mult,
                                                                    int32_t zy, double lo, double hi, uint8_t *y,
                                                                    long P, const int mode, long spill)
{
    uint8_t buf[EMBER_QDC_ROWS][64];
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__GNUC__)
    const __m512d l = _mm512_set1_pd(lo), h = _mm512_set1_pd(hi);
    const __m512i z = _mm512_set1_epi32(zy);
    for (int v = 0; v < 4; v++) {
        const __m512i c = _mm512_loadu_si512(corr + 16 * v);
        const __m512d m0 = _mm512_loadu_pd(mult + 16 * v), m1 = _mm512_loadu_pd(mult + 16 * v + 8);
        for (long r = 0; r < mr; r++)
            _mm_storeu_si128((__m128i *)(buf[r] + 16 * v),
                             ember_qdc_rq16(_mm512_add_epi32(_mm512_loadu_si512(tile + r * 64 + 16 * v), c), m0, m1,
                                            l, h, z, mode));
    }
#else
    (void)mode;
    for (long r = 0; r < mr; r++)
        for (int j = 0; j < 64; j++) buf[r][j] = ember_qdc_rq1(tile[r * 64 + j], corr[j], mult[j], zy, lo, hi);
#endif
#if defined(__AVX512BW__) && defined(__GNUC__)
    if (mr == 6 && spill) {
        /* a full tile whose thread stores the next 2 pixels later: each channel's 6 bytes and
         * 2 zeros as one 8-byte store, the words interleaved in registers (in-lane unpacks:
         * lane L of word vector k holds channels 16 L + 2 k and 16 L + 2 k + 1) */
        __m512i r0 = _mm512_loadu_si512(buf[0]), r1 = _mm512_loadu_si512(buf[1]);
        __m512i r2 = _mm512_loadu_si512(buf[2]), r3 = _mm512_loadu_si512(buf[3]);
        __m512i r4 = _mm512_loadu_si512(buf[4]), r5 = _mm512_loadu_si512(buf[5]), z = _mm512_setzero_si512();
        __m512i p01l = _mm512_unpacklo_epi8(r0, r1), p01h = _mm512_unpackhi_epi8(r0, r1);
        __m512i p23l = _mm512_unpacklo_epi8(r2, r3), p23h = _mm512_unpackhi_epi8(r2, r3);
        __m512i p45l = _mm512_unpacklo_epi8(r4, r5), p45h = _mm512_unpackhi_epi8(r4, r5);
        __m512i q[4] = {_mm512_unpacklo_epi16(p01l, p23l), _mm512_unpackhi_epi16(p01l, p23l),
                        _mm512_unpacklo_epi16(p01h, p23h), _mm512_unpackhi_epi16(p01h, p23h)};
        __m512i h[4] = {_mm512_unpacklo_epi16(p45l, z), _mm512_unpackhi_epi16(p45l, z),
                        _mm512_unpacklo_epi16(p45h, z), _mm512_unpackhi_epi16(p45h, z)};
        uint64_t words[8][8];
        for (int k = 0; k < 4; k++) {
            _mm512_storeu_si512(words[2 * k], _mm512_unpacklo_epi32(q[k], h[k]));
            _mm512_storeu_si512(words[2 * k + 1], _mm512_unpackhi_epi32(q[k], h[k]));
        }
        for (long j = 0; j < nr; j++) {
            long lane = j / 16, within = j % 16;
            memcpy(y + j * P, &words[within / 2][2 * lane + within % 2], 8);
        }
        return;
    }
    if (mr == 6) {
        /* a full tile: each channel's 6 bytes as one 4-byte and one 2-byte store, the words
         * interleaved in registers (in-lane unpacks: lane L of quad k holds channels
         * 16 L + 4 k .. + 3, of pair k channels 16 L + 8 k .. + 7) */
        __m512i r0 = _mm512_loadu_si512(buf[0]), r1 = _mm512_loadu_si512(buf[1]);
        __m512i r2 = _mm512_loadu_si512(buf[2]), r3 = _mm512_loadu_si512(buf[3]);
        __m512i r4 = _mm512_loadu_si512(buf[4]), r5 = _mm512_loadu_si512(buf[5]);
        __m512i p01l = _mm512_unpacklo_epi8(r0, r1), p01h = _mm512_unpackhi_epi8(r0, r1);
        __m512i p23l = _mm512_unpacklo_epi8(r2, r3), p23h = _mm512_unpackhi_epi8(r2, r3);
        uint32_t quad[4][16];
        uint16_t pair[2][32];
        _mm512_storeu_si512(quad[0], _mm512_unpacklo_epi16(p01l, p23l));
        _mm512_storeu_si512(quad[1], _mm512_unpackhi_epi16(p01l, p23l));
        _mm512_storeu_si512(quad[2], _mm512_unpacklo_epi16(p01h, p23h));
        _mm512_storeu_si512(quad[3], _mm512_unpackhi_epi16(p01h, p23h));
        _mm512_storeu_si512(pair[0], _mm512_unpacklo_epi8(r4, r5));
        _mm512_storeu_si512(pair[1], _mm512_unpackhi_epi8(r4, r5));
        for (long j = 0; j < nr; j++) {
            long lane = j / 16, within = j % 16;
            uint32_t w4 = quad[within / 4][4 * lane + within % 4];
            uint16_t w2 = pair[within / 8][8 * lane + within % 8];
            memcpy(y + j * P, &w4, 4);
            memcpy(y + j * P + 4, &w2, 2);
        }
        return;
    }
#endif
    for (long j = 0; j < nr; j++)
        for (long r = 0; r < mr; r++) y[j * P + r] = buf[r][j];
}

/* Row r of a tile requantized to 64 bytes, as ember_qdc_rq16 does (corr: the zero-point
 * correction plus the bias of the row's channel). */
static inline __attribute__((always_inline)) void ember_qdc_requant(const int32_t *t, int32_t corr, double mult,
                                                                   int32_t zy, double lo, double hi, uint8_t *out,
                                                                   const int mode)
{
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__GNUC__)
    const __m512i c = _mm512_set1_epi32(corr), z = _mm512_set1_epi32(zy);
    const __m512d m = _mm512_set1_pd(mult), l = _mm512_set1_pd(lo), h = _mm512_set1_pd(hi);
    __m128i bytes[4];
    for (int v = 0; v < 4; v++)
        bytes[v] = ember_qdc_rq16(_mm512_add_epi32(_mm512_loadu_si512(t + 16 * v), c), m, m, l, h, z, mode);
    /* one 64-byte store, so the copies that read the row back get it forwarded whole */
    __m512i row = _mm512_inserti32x4(_mm512_castsi128_si512(bytes[0]), bytes[1], 1);
    row = _mm512_inserti32x4(_mm512_inserti32x4(row, bytes[2], 2), bytes[3], 3);
    _mm512_storeu_si512(out, row);
#else
    (void)mode;
    for (int j = 0; j < 64; j++) out[j] = ember_qdc_rq1(t[j], corr, mult, zy, lo, hi);
#endif
}

/* n <= 64 bytes copied as two overlapping moves of the largest power of two <= n: memcpy of a
 * few dozen bytes became `rep movs` (slow to start) and masked AVX-512 stores are slow on some
 * cores (Zen 4). */
static inline void ember_qdc_copy(uint8_t *dst, const uint8_t *src, long n)
{
    if (n >= 32) {
        uint8_t a[32], b[32];
        memcpy(a, src, 32); memcpy(b, src + n - 32, 32);
        memcpy(dst, a, 32); memcpy(dst + n - 32, b, 32);
    } else if (n >= 16) {
        uint8_t a[16], b[16];
        memcpy(a, src, 16); memcpy(b, src + n - 16, 16);
        memcpy(dst, a, 16); memcpy(dst + n - 16, b, 16);
    } else if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, src, 8); memcpy(&b, src + n - 8, 8);
        memcpy(dst, &a, 8); memcpy(dst + n - 8, &b, 8);
    } else {
        for (long i = 0; i < n; i++) dst[i] = src[i];
    }
}

/* The grid positions [q0, q0 + 64) of one requantized row copied to the output row-major
 * channel plane y (OH x OW), dropping the grid's columns past OW and positions past the grid. */
static void ember_qdc_store(const uint8_t *row, long q0, long grid, long wph, long ow, uint8_t *y)
{
    long q = q0, end = q0 + 64 < grid ? q0 + 64 : grid;
    while (q < end) {
        long oy = q / wph, ox = q % wph;
        if (ox >= ow) { q += wph - ox; continue; }
        long n = ow - ox < end - q ? ow - ox : end - q;
        ember_qdc_copy(y + oy * ow + ox, row + (q - q0), n);
        q += n;
    }
}
"""


def _dims(view_or_instr_types: tuple) -> dict:
    """Shapes and strides of the computation (x [N, C, H, W], w [M, C, KH, KW])."""
    x, w, out, attrs = view_or_instr_types
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    oh, ow = out.shape[2:]
    sh, sw = attrs.strides
    pt, pl = attrs.pads[0], attrs.pads[1]
    hp, wp = (oh - 1) * sh + kh, (ow - 1) * sw + kw  # the padded extent the windows read
    hph, wph = -(-hp // sh), -(-wp // sw)
    cq = -(-c // 4)
    grid = oh * wph
    blocks = -(-grid // QDC_NR)
    reach = ((kh - 1) // sh) * wph + (kw - 1) // sw
    plane = -(-max(hph * wph, blocks * QDC_NR + reach) // 16) * 16
    return {"n": n, "c": c, "h": h, "w": wd, "m": m, "kh": kh, "kw": kw, "oh": oh, "ow": ow, "sh": sh, "sw": sw,
            "pt": pt, "pl": pl, "hph": hph, "wph": wph, "cq": cq, "grid": grid, "blocks": blocks, "plane": plane,
            "groups": kh * kw * cq, "phases": sh * sw, "mblocks": -(-m // QDC_MR)}


def _accepts(view: OpView) -> str | None:
    x, w, out = view.operand(0), view.operand(3), view.results[0]
    attrs = view.attrs
    if x.rank != 4 or attrs.group != 1 or any(d != 1 for d in attrs.dilations):
        return "qconv_direct takes 2-D convolutions of one group without dilation"
    if x.dtype not in (DType.UINT8, DType.INT8) or out.dtype not in (DType.UINT8, DType.INT8) \
            or w.dtype is not DType.INT8:
        return "qconv_direct takes u8/i8 inputs and outputs and int8 weights"
    if not all(view.constant[i] for i in (1, 2, 3, 4, 5, 6, 7)) or (len(view.operands) > 8 and view.operands[8]
                                                                    is not None and not view.constant[8]):
        return "qconv_direct needs constant weights, scales, zero points and bias"
    if -(-x.shape[1] // 4) * 4 * w.shape[2] * w.shape[3] > MAX_K:
        return f"qconv_direct sums at most {MAX_K} products per output"
    for i, count in ((1, 1), (2, 1), (4, w.shape[0]), (5, w.shape[0]), (6, 1), (7, 1)):
        t = view.operand(i)
        if t.size not in (1, count) or (t.size > 1 and t.rank != 1):
            return "qconv_direct takes per-tensor x/y parameters and per-tensor or per-channel weight ones"
    if any(view.operand(i).dtype is not DType.FLOAT32 for i in (1, 4, 6)):
        return "qconv_direct takes float32 scales"
    return None


def _applies(instr: Instr, options: KernelOptions) -> bool:
    w_zero = instr.operand(6)
    return is_whole_weight(w_zero) and not np.any(w_zero.constant()) and bias_fits_int32(instr)


def _roles(instr: Instr) -> tuple[list[Buffer], Buffer | None]:
    """y, x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero (all present), and the bias."""
    ops = instr.base_operands
    required = [b for b in ops[:9] if b is not None]
    if len(required) != 9:
        raise EmberError(f"node '{instr.source}' (QLinearConv): a scale or zero point is absent")
    return required, ops[9] if len(ops) > 9 else None


def channel_terms(instr: Instr, d: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per output channel (zero-padded to either layout's channel count): the int32 zero-point
    correction -zx sum w, the bias (float64) and x_scale * w_scale / y_scale (float64, as the
    interpreter divides)."""
    ops, bias = _roles(instr)
    x, sx, zx, w, sw, _, sy, zy = ops[1:9]
    m, rows = d["m"], max(d["mblocks"] * QDC_MR, -(-d["m"] // QNR) * QNR)  # channels of either layout
    weights = w.constant().astype(np.int64).reshape(m, -1)
    flip = 128 if x.type.dtype is DType.INT8 else 0
    zx_u = int(zx.constant().reshape(-1)[0]) + flip
    corr = np.zeros(rows, np.int32)
    corr[:m] = (-zx_u * weights.sum(axis=1)).astype(np.int32)
    b = np.zeros(rows, np.float64)
    if bias is not None:
        b[:m] = bias.constant().astype(np.float64).reshape(-1)
    mult = np.zeros(rows, np.float64)
    mult[:m] = np.float64(sx.constant().reshape(-1)[0]) * np.broadcast_to(
        sw.constant().astype(np.float64).reshape(-1), (m,)) / np.float64(sy.constant().reshape(-1)[0])
    return corr, b, mult


def bias_fits_int32(instr: Instr) -> bool:
    """Whether sum (x - zx) w + bias fits int32 for every input (|x - zx| <= 255), so the bias
    joins the zero-point correction in the int32 sum, exactly."""
    ops, bias = _roles(instr)
    if bias is None:
        return True
    w = ops[4].constant().astype(np.int64)
    reach = np.abs(w.reshape(w.shape[0], -1)).sum(axis=1) * 255 + np.abs(bias.constant().astype(np.int64).reshape(-1))
    return bool(reach.max(initial=0) < 2 ** 31)


def requant_mode(instr: Instr) -> str:
    """EMBER_QDC_SIGNED for an int8 output; EMBER_QDC_WIDE unless every |acc * mult| stays
    below 2^30 (|acc| <= 255 sum |w| + |bias| per channel), so that the rounded products and
    the zero point fit int32 and the pack's saturation is the clamp."""
    ops, bias = _roles(instr)
    w = ops[4].constant().astype(np.float64)
    m = w.shape[0]
    reach = np.abs(w.reshape(m, -1)).sum(axis=1) * 255
    if bias is not None:
        reach = reach + np.abs(bias.constant().astype(np.float64).reshape(-1))
    _, _, mult = channel_terms(instr, _layout(instr))
    with np.errstate(invalid="ignore", over="ignore"):
        fits = bool(np.all(reach * np.abs(mult[:m]) < 2.0 ** 30))
    flags = (["EMBER_QDC_SIGNED"] if ops[0].type.dtype is DType.INT8 else []) + ([] if fits else ["EMBER_QDC_WIDE"])
    return " | ".join(flags) or "0"


def _named(tables: list[tuple[str, np.ndarray]]) -> list[tuple[str, str, np.ndarray]]:
    return [(hashlib.sha256(data.tobytes()).hexdigest()[:16], f"qdc_{name}", data) for name, data in tables]


def channel_tables(instr: Instr, d: dict) -> list[tuple[str, str, np.ndarray]]:
    """corr (the zero-point correction plus the bias, in int32: bias_fits_int32) and mult."""
    corr, b, mult = channel_terms(instr, d)
    return _named([("corr_bias", corr + b.astype(np.int32)), ("mult", mult)])


def _tables(instr: Instr, d: dict) -> list[tuple[str, str, np.ndarray]]:
    """channel_tables and the k groups' offsets in the planes."""
    koff = []
    for u in range(d["kh"]):
        for v in range(d["kw"]):
            phase = (u % d["sh"]) * d["sw"] + v % d["sw"]
            shift = (u // d["sh"]) * d["wph"] + v // d["sw"]
            koff += [((phase * d["cq"] + q) * d["plane"] + shift) * 4 for q in range(d["cq"])]
    return channel_tables(instr, d) + _named([("koff", np.asarray(koff, np.int64))])


def pack_qdc_weights(w: np.ndarray) -> np.ndarray:
    """int8 [M, C, KH, KW] as [M/6][tap][C/4][6][4] (zero-padded couts and channels): the
    weights of one k group (4 channels of a tap) for the 6 output channels of a tile."""
    m, c, kh, kw = w.shape
    mb, cq = -(-m // QDC_MR), -(-c // 4)
    padded = np.zeros((mb * QDC_MR, cq * 4, kh, kw), np.int8)
    padded[:m, :c] = w
    # [mb, 6, cq, 4, kh, kw] -> [mb, kh, kw, cq, 6, 4]
    return np.ascontiguousarray(padded.reshape(mb, QDC_MR, cq, 4, kh, kw).transpose(0, 4, 5, 2, 1, 3)).reshape(-1)


def _layout(instr: Instr) -> dict:
    ops, _ = _roles(instr)
    return _dims((ops[1].type, ops[4].type, ops[0].type, instr.attrs))


def _plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    d = _layout(instr)
    w = _roles(instr)[0][4]
    threads = threads_for(options.num_threads, d["n"] * d["grid"] * d["m"] * d["groups"] * 4)
    plan = KernelPlan({"threads": threads}, scratch_bytes=d["phases"] * d["cq"] * d["plane"] * 4)
    plan.packed = [(w, "qdc_weights", pack_qdc_weights(w.constant()))]
    plan.tables = _tables(instr, d)
    return plan


def _plane_fill(d: dict, flip: int) -> str:
    """The phase planes of image nb from x: the zero point everywhere, then each input row's
    values at their phase, row and column, 4 channels interleaved (one loop per quad of
    channel rows, which the compiler vectorizes as interleaving stores)."""
    sh, sw, c = d["sh"], d["sw"], d["c"]

    def quad(count: int) -> list[str]:
        srcs = [f"const uint8_t *s{t} = xn + ((4 * cq + {t}) * {d['h']} + ih) * {d['w']} + iw0;" for t in range(count)]
        body = " ".join(f"dst[4 * j + {t}] = (uint8_t)(s{t}[j * {sw}] ^ {flip});" for t in range(count))
        return [*srcs, f"for (long j = 0; j < n; j++) {{ {body} }}"]

    w = CWriter().line(f"memset(planes, xz, (size_t){d['phases'] * d['cq'] * d['plane'] * 4});")
    with w.block(f"for (long cq = 0; cq < {d['cq']}; cq++)"):
        with w.block(f"for (long ih = 0; ih < {d['h']}; ih++)"):
            w.line(f"long ph = ih + {d['pt']}, a = ph % {sh}, r = ph / {sh};", f"if (r >= {d['hph']}) continue;")
            with w.block(f"for (long b = 0; b < {sw}; b++)"):
                # the first input column of phase b, its column in the plane, and how many
                w.line(f"long iw0 = ((b - {d['pl']}) % {sw} + {sw}) % {sw}, col0 = (iw0 + {d['pl']}) / {sw};",
                       f"long n = iw0 < {d['w']} ? ({d['w']} - iw0 + {sw} - 1) / {sw} : 0;",
                       f"if (col0 + n > {d['wph']}) n = {d['wph']} - col0 > 0 ? {d['wph']} - col0 : 0;",
                       f"uint8_t *dst = planes + ((((a * {sw} + b) * {d['cq']} + cq) * {d['plane']}) + "
                       f"r * {d['wph']} + col0) * 4;")
                if c % 4:
                    with w.block(f"if (cq == {c // 4})"):
                        w.line(*quad(c % 4), "continue;")
                if c >= 4:
                    w.line(*quad(4))
    return w.text()


@dataclass(frozen=True)
class _Operands:
    """What every int8 convolution emitter reads off the instruction: the 8-bit input and
    output, the input zero point XOR'd into unsigned form (`flip`) and the output's clamp."""

    out: Any
    x: Any
    x_zero: Any
    y_zero: Any
    flip: int
    lo: float
    hi: float

    @staticmethod
    def of(instr: Instr) -> _Operands:
        ops, _ = _roles(instr)
        out, x = ops[0], ops[1]
        lo, hi = (-128.0, 127.0) if out.type.dtype is DType.INT8 else (0.0, 255.0)
        return _Operands(out, x, ops[3], ops[8], 128 if x.type.dtype is DType.INT8 else 0, lo, hi)

    def declarations(self, em: Emitter, instr: Instr, weights: str) -> list[str]:
        """The C locals they all start with: x, y, zero points, the packed weights as
        `weights` (a declaration's type and name)."""
        return [f"const uint8_t *x = {em.address(self.x)};",
                f"uint8_t *y = {em.address(self.out)};",
                f"const uint8_t xz = (uint8_t)((uint8_t){em.pointer(self.x_zero, const=True)}[0] ^ {self.flip});",
                f"const int32_t zy = (int32_t){em.pointer(self.y_zero, const=True)}[0];",
                f"{weights} = ({weights.split(' *')[0]} *){em.packed(instr, 0)};"]

    def folded(self, em: Emitter, instr: Instr) -> list[str]:
        """qconv_direct's and qconv_rows' per-channel tables (corr with the bias in it) and
        their clamp around the rounding, relative to the zero point."""
        return [f"const int32_t *corr = {em.table(instr, 0)};",
                f"const double *mult = {em.table(instr, 1)};",
                f"const double lo = (double)({int(self.lo)} - zy), hi = (double)({int(self.hi)} - zy);"]


def emit_qconv_direct(em: Emitter, instr: Instr) -> str:
    d = _layout(instr)
    q = _Operands.of(instr)
    out, flip = q.out, q.flip
    if out.type.size == 0:
        return "/* empty result */"
    threads = int(param(instr, "threads", 1))
    w = CWriter().line(
        *q.declarations(em, instr, "const int8_t *wp"), *q.folded(em, instr),
        f"const int64_t *koff = {em.table(instr, 2)};",
        f"uint8_t *planes = (uint8_t *){em.scratch(instr)};",
        f"/* {c_type(out.type.dtype)} output through its bytes */")
    with w.block(f"for (long nb = 0; nb < {d['n']}; nb++)"):
        w.line(f"const uint8_t *xn = x + nb * {d['c'] * d['h'] * d['w']};",
               f"uint8_t *yn = y + nb * {d['m'] * d['oh'] * d['ow']};",
               _plane_fill(d, flip))
        if threads > 1:
            w.line(f"#pragma omp parallel for num_threads({threads}) schedule(static)")
        with w.block(f"for (long t = 0; t < {d['blocks'] * d['mblocks']}; t++)"):
            w.line(f"long q0 = t / {d['mblocks']} * {QDC_NR}, mb = t % {d['mblocks']};",
                   f"int32_t tile[{QDC_MR * QDC_NR}] __attribute__((aligned(64)));",
                   "uint8_t row[64] __attribute__((aligned(64)));",
                   f"long mr = {d['m']} - mb * {QDC_MR} < {QDC_MR} ? {d['m']} - mb * {QDC_MR} : {QDC_MR};",
                   f"ember_qdc_tile(planes + q0 * 4, koff, {d['groups']}, wp + mb * {d['groups'] * 4 * QDC_MR}, tile, "
                   "mr);")
            with w.block("for (long r = 0; r < mr; r++)"):
                w.line(f"long co = mb * {QDC_MR} + r;",
                       f"ember_qdc_requant(tile + r * 64, corr[co], mult[co], zy, lo, hi, row, {requant_mode(instr)});",
                       f"ember_qdc_store(row, q0, {d['grid']}, {d['wph']}, {d['ow']}, yn + co * {d['oh'] * d['ow']});")
    return w.text()


# qconv_rows: the same planes, read as GEMM rows --------------------------------------------
#
# On small maps the 64-wide pixel vectors above mostly compute the grid's padding columns (7x7
# outputs on a grid of 9 columns, 49 pixels in 64 lanes). There, pixels become the GEMM's rows
# instead (6 at a time, output channels in 64-wide panels packed as the qgemm core of
# quantized.py packs B), each row's k groups broadcast from the planes where they lie (no
# im2col), and tiles are requantized per channel and stored transposed into NCHW.


# What storing one output costs beside the products, in products (fitted to single ResNet-18
# convolutions timed both ways at 1 thread, AMD EPYC with AVX-512 VNNI: 56x56x64 3x3 direct 1%
# faster, 3x3/2 onto 28x28x128 rows 2% faster, 1x1/2 onto 14x14x256 rows 10% faster, onto
# 28x28x128 direct 10% faster): qconv_rows stores transposed, a channel's 6 pixels at a time
# (with threads in two pieces, as before that fit: "rows_threads").
STORE_COST = {"direct": 32, "rows": 58, "rows_threads": 100}


def executed_macs(d: dict) -> tuple[int, int]:
    """Products computed, padding included, by (qconv_direct, qconv_rows) for one image: a
    last tile of fewer output channels (direct) or pixels (rows) computes only those."""
    direct = d["m"] * d["blocks"] * QDC_NR
    pixels = d["oh"] * d["ow"]
    rows = pixels * -(-d["m"] // QNR) * QNR
    return direct * d["groups"] * 4, rows * d["groups"] * 4


def prefers_rows(d: dict, threads: int = 1) -> bool:
    """Whether qconv_rows costs less: its products and stores against qconv_direct's."""
    direct, rows = executed_macs(d)
    outputs = d["m"] * d["oh"] * d["ow"]
    store = STORE_COST["rows" if threads == 1 else "rows_threads"]
    return rows + store * outputs < direct + STORE_COST["direct"] * outputs


def _rows_threads(d: dict, options: KernelOptions) -> int:
    return threads_for(options.num_threads, d["n"] * d["oh"] * d["ow"] * d["m"] * d["groups"] * 4)


def _rows_apply(instr: Instr, options: KernelOptions) -> bool:
    if not _applies(instr, options):
        return False
    d = _layout(instr)
    return prefers_rows(d, _rows_threads(d, options))


def _direct_apply(instr: Instr, options: KernelOptions) -> bool:
    return _applies(instr, options) and not _rows_apply(instr, options)


def pack_rows_weights(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 [M, C, KH, KW] as the GEMM's B [K, M] with k = (tap, channel quad, 4), channels
    zero-padded to quads, in qgemm panels (and its column sums)."""
    m, c, kh, kw = w.shape
    cq = -(-c // 4)
    padded = np.zeros((m, cq * 4, kh, kw), np.int8)
    padded[:, :c] = w
    b = padded.transpose(2, 3, 1, 0).reshape(kh * kw * cq * 4, m)
    return pack_qpanels(np.ascontiguousarray(b))


def _rows_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    d = _layout(instr)
    w = _roles(instr)[0][4]
    threads = _rows_threads(d, options)
    plan = KernelPlan({"threads": threads}, scratch_bytes=d["phases"] * d["cq"] * d["plane"] * 4)
    plan.packed = [(w, "qpanels64_taps", pack_rows_weights(w.constant())[0])]
    plan.tables = _tables(instr, d)
    return plan


def emit_qconv_rows(em: Emitter, instr: Instr) -> str:
    """Tiles of 6 pixels x 64 output channels (panels of the packed weights), each pixel's k
    groups broadcast from the planes (ember_qdc_rowtile), requantized per channel and stored
    transposed into NCHW (ember_qdc_colstore)."""
    d = _layout(instr)
    q = _Operands.of(instr)
    out, flip = q.out, q.flip
    if out.type.size == 0:
        return "/* empty result */"
    pixels, m, groups = d["oh"] * d["ow"], d["m"], d["groups"]
    blocks, panels = -(-pixels // QMR), -(-m // QNR)
    threads = int(param(instr, "threads", 1))
    # one thread stores a panel's blocks in order, so each tile may spill onto the next one's
    spill = f"i0 + 8 <= {pixels}" if threads == 1 else "0"
    w = CWriter().line(
        *q.declarations(em, instr, "const int8_t *bp"), *q.folded(em, instr),
        f"const int64_t *koff = {em.table(instr, 2)};",
        f"uint8_t *planes = (uint8_t *){em.scratch(instr)};")
    with w.block(f"for (long nb = 0; nb < {d['n']}; nb++)"):
        w.line(f"const uint8_t *xn = x + nb * {d['c'] * d['h'] * d['w']};",
               f"uint8_t *yn = y + nb * {m * pixels};",
               _plane_fill(d, flip))
        if threads > 1:
            w.line(f"#pragma omp parallel for num_threads({threads}) schedule(static)")
        with w.block(f"for (long t = 0; t < {panels * blocks}; t++)"):
            w.line(f"long p = t / {blocks}, i0 = t % {blocks} * {QMR};",
                   f"long mr = {pixels} - i0 < {QMR} ? {pixels} - i0 : {QMR}, nr = {m} - p * {QNR};",
                   f"int32_t tile[{QMR * QNR}] __attribute__((aligned(64)));",
                   f"const uint8_t *rows[{QMR}];",
                   f"for (long r = 0; r < {QMR}; r++) {{ long i = i0 + (r < mr ? r : 0); "
                   f"rows[r] = planes + 4 * (i / {d['ow']} * {d['wph']} + i % {d['ow']}); }}",
                   f"ember_qdc_rowtile(rows, koff, {groups}, bp + p * {groups * 4 * QNR}, tile, mr);",
                   f"ember_qdc_colstore(tile, mr, nr < {QNR} ? nr : {QNR}, corr + p * {QNR}, mult + p * {QNR}, zy, "
                   f"lo, hi, yn + p * {QNR * pixels} + i0, {pixels}, {requant_mode(instr)}, {spill});")
    return w.text()


# Before qconv_im2col, which takes what these refuse; rows where it computes clearly less.
C_KERNELS.add(Kernel("qconv_direct", ("QLinearConv",), emit_qconv_direct, accepts=_accepts, applies=_direct_apply,
                     plan=_plan, preamble=QDC_C), first=True)
C_KERNELS.add(Kernel("qconv_rows", ("QLinearConv",), emit_qconv_rows, accepts=_accepts, applies=_rows_apply,
                     plan=_rows_plan, preamble=QDC_C), first=True)

__all__ = ["QDC_MR", "QDC_NR", "STORE_COST", "executed_macs", "pack_qdc_weights", "pack_rows_weights", "prefers_rows"]
