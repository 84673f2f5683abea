"""The integer GEMM core of the quantized kernels (codegen/kernels/quantized.py): its C, which
those kernels print once per program as their preamble, and the Python mirror of its packed
B layout, used for B known at compile time.

C = (A - za)(B - zb) runs as A_u . B_s, A_u = A as uint8 and B_s = B as int8 (what AVX-512
VNNI's vpdpbusd multiplies), in tiles of EMBER_QMR rows x one 64-column panel of B packed as
[ceil(N/64)][ceil(K/4)][64][4]; the zero points and the +-128 flips come back as per-row and
per-column corrections in the tile's store (ember_qstore), which also requantizes."""
from __future__ import annotations

import numpy as np

QNR, QMR = 64, 6  # mirrors EMBER_QNR / EMBER_QMR

QGEMM_C = r"""
#if (defined(__AVX512VNNI__) || defined(__AVX2__)) && defined(__GNUC__)
#include <immintrin.h>
#endif
#define EMBER_QNR 64
#define EMBER_QMR 6

/* Where a GEMM's results go: int32 as they are (MatMulInteger, ConvInteger) or requantized
 * to 8 bits (QLinear*): nearbyint(acc * a_scale * b_scale / y_scale) + y_zero, saturated.
 * c[i * c_rs + j * c_cs]; mcol[j] is the multiplier when a_scale is per tensor. */
typedef struct {
    int kind; /* 0: int32, 1: uint8, 2: int8 */
    void *c; long c_rs, c_cs;
    const int32_t *bias;     /* per column, or NULL */
    const float *a_scale;    /* per row, or NULL when per tensor */
    const float *b_scale; long b_step;
    double y_scale, y_zero;
    const double *mcol;
} ember_qout;

/* B [K][N] (element (k, j) at b[k * ks + j * js], flipped to int8 by xor) into panels
 * [ceil(N/64)][ceil(K/4)][64][4], zero-padded, and its column sums. */
static void ember_qpack(long K, long N, const uint8_t *b, long ks, long js, uint8_t flip, int8_t *bp,
                        int32_t *colsum)
{
    long groups = (K + 3) / 4, panels = (N + EMBER_QNR - 1) / EMBER_QNR;
    for (long p = 0; p < panels; p++)
        for (long q = 0; q < groups; q++)
            for (long c = 0; c < EMBER_QNR; c++)
                for (long t = 0; t < 4; t++) {
                    long k = 4 * q + t, j = p * EMBER_QNR + c;
                    bp[((p * groups + q) * EMBER_QNR + c) * 4 + t] =
                        k < K && j < N ? (int8_t)(b[k * ks + j * js] ^ flip) : 0;
                }
    for (long j = 0; j < N; j++) colsum[j] = 0;
    for (long k = 0; k < K; k++)
        for (long j = 0; j < N; j++) colsum[j] += (int8_t)(b[k * ks + j * js] ^ flip);
}

/* Row sums of A_u = A ^ flip; with flip (int8 A), A_u is also written to `copy` [M][K]. */
static void ember_qrows(long M, long K, const uint8_t *a, long a_rs, uint8_t flip, int32_t *rowsum, uint8_t *copy)
{
    for (long i = 0; i < M; i++) {
        int32_t s = 0;
        for (long k = 0; k < K; k++) {
            uint8_t v = a[i * a_rs + k] ^ flip;
            if (copy) copy[i * K + k] = v;
            s += v;
        }
        rowsum[i] = s;
    }
}

static inline __attribute__((always_inline)) uint32_t ember_qload(const uint8_t *p, long n)
{
    uint32_t w = 0;
    memcpy(&w, p, (size_t)n);
    return w;
}

/* One EMBER_QMR x 64 tile of A_u . B_s over `groups` k groups (the last reads only `tail`
 * bytes of each row of A, 4 when K divides by 4). */
static void ember_qtile(const uint8_t *const *rows, long groups, long tail, const int8_t *bp, int32_t *tile)
{
#if defined(__AVX512VNNI__) && defined(__GNUC__)
    /* 24 named accumulators, so they stay in registers (an array of vectors spills), and
     * vpdpbusd as inline asm: GCC 12 copies the accumulator of _mm512_dpbusd_epi32 through
     * another register and the stack on every step, which halved the speed. */
#define EMBER_DPBUSD(acc, a, b) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b))
#define EMBER_QACC(r) __m512i c##r##0 = _mm512_setzero_si512(), c##r##1 = c##r##0, c##r##2 = c##r##0, c##r##3 = c##r##0
    EMBER_QACC(0); EMBER_QACC(1); EMBER_QACC(2); EMBER_QACC(3); EMBER_QACC(4); EMBER_QACC(5);
#define EMBER_QROW(r, q, n)                                                                   \
    do {                                                                                      \
        __m512i av = _mm512_set1_epi32((int)ember_qload(rows[r] + 4 * (q), n));               \
        EMBER_DPBUSD(c##r##0, av, b0);                                                      \
        EMBER_DPBUSD(c##r##1, av, b1);                                                      \
        EMBER_DPBUSD(c##r##2, av, b2);                                                      \
        EMBER_DPBUSD(c##r##3, av, b3);                                                      \
    } while (0)
#define EMBER_QSTEP(q, n)                                                                     \
    do {                                                                                      \
        const int8_t *b = bp + (q) * 4 * EMBER_QNR;                                           \
        __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 64);                  \
        __m512i b2 = _mm512_loadu_si512(b + 128), b3 = _mm512_loadu_si512(b + 192);           \
        EMBER_QROW(0, q, n); EMBER_QROW(1, q, n); EMBER_QROW(2, q, n);                        \
        EMBER_QROW(3, q, n); EMBER_QROW(4, q, n); EMBER_QROW(5, q, n);                        \
    } while (0)
    long full = tail == 4 ? groups : groups - 1;
    for (long q = 0; q < full; q++) EMBER_QSTEP(q, 4);
    if (full < groups) EMBER_QSTEP(full, tail);
#define EMBER_QPUT(r)                                                                         \
    do {                                                                                      \
        _mm512_storeu_si512(tile + (r) * EMBER_QNR, c##r##0);                                 \
        _mm512_storeu_si512(tile + (r) * EMBER_QNR + 16, c##r##1);                            \
        _mm512_storeu_si512(tile + (r) * EMBER_QNR + 32, c##r##2);                            \
        _mm512_storeu_si512(tile + (r) * EMBER_QNR + 48, c##r##3);                            \
    } while (0)
    EMBER_QPUT(0); EMBER_QPUT(1); EMBER_QPUT(2); EMBER_QPUT(3); EMBER_QPUT(4); EMBER_QPUT(5);
#undef EMBER_QACC
#undef EMBER_DPBUSD
#undef EMBER_QROW
#undef EMBER_QSTEP
#undef EMBER_QPUT
#elif defined(__AVX2__) && defined(__GNUC__)
    /* AVX2 has no vpdpbusd, and vpmaddubsw would saturate (255 * 127 * 2 > 32767): the bytes
     * are widened to int16 for vpmaddwd, exact, whose int32 lanes each sum two products of
     * one column; pairs of lanes are added once at the end. A's 4 bytes per k group are
     * widened once per chunk of k groups, B's as they load; 8 columns x 3 rows at a time keep
     * accumulators, B and A within the 16 registers (6 rows spilled). */
    enum { EMBER_QCH = 48 }; /* k groups per chunk: its 12 KiB of B stay in L1 across the 16 passes */
    uint64_t a16[EMBER_QMR][EMBER_QCH];
    for (int x = 0; x < EMBER_QMR * EMBER_QNR; x++) tile[x] = 0;
    for (long q0 = 0; q0 < groups; q0 += EMBER_QCH) {
        long qn = groups - q0 < EMBER_QCH ? groups - q0 : EMBER_QCH;
        for (int r = 0; r < EMBER_QMR; r++)
            for (long q = 0; q < qn; q++) {
                uint64_t w = ember_qload(rows[r] + 4 * (q0 + q), q0 + q + 1 < groups ? 4 : tail);
                w = (w | w << 16) & 0x0000FFFF0000FFFFull;
                a16[r][q] = (w | w << 8) & 0x00FF00FF00FF00FFull;
            }
        for (int s = 0; s < EMBER_QNR / 8; s++)
            for (int h = 0; h < EMBER_QMR; h += 3) {
#define EMBER_QACC(r) __m256i c##r##0 = _mm256_setzero_si256(), c##r##1 = c##r##0
                EMBER_QACC(0); EMBER_QACC(1); EMBER_QACC(2);
#define EMBER_QROW(r)                                                                         \
    do {                                                                                      \
        __m256i av = _mm256_set1_epi64x((long long)a16[h + r][q]);                            \
        c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(av, b0));                       \
        c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(av, b1));                       \
    } while (0)
                for (long q = 0; q < qn; q++) {
                    const int8_t *b = bp + (q0 + q) * 4 * EMBER_QNR + s * 32;
                    __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b));
                    __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 16)));
                    EMBER_QROW(0); EMBER_QROW(1); EMBER_QROW(2);
                }
                /* hadd gives columns 0 1 4 5 | 2 3 6 7: the 64-bit permute puts them in order. */
#define EMBER_QPUT(r)                                                                         \
    do {                                                                                      \
        __m256i sum = _mm256_permute4x64_epi64(_mm256_hadd_epi32(c##r##0, c##r##1), 0xD8);    \
        int32_t *t = tile + (h + r) * EMBER_QNR + s * 8;                                      \
        _mm256_storeu_si256((__m256i *)t, _mm256_add_epi32(_mm256_loadu_si256((__m256i *)t), sum)); \
    } while (0)
                EMBER_QPUT(0); EMBER_QPUT(1); EMBER_QPUT(2);
#undef EMBER_QACC
#undef EMBER_QROW
#undef EMBER_QPUT
            }
    }
#else
    /* Portable: each column a 4-deep dot product per k group, widened to int32. */
    for (int r = 0; r < EMBER_QMR; r++) {
        int32_t *t = tile + r * EMBER_QNR;
        for (int c = 0; c < EMBER_QNR; c++) t[c] = 0;
        for (long q = 0; q < groups; q++) {
            const int8_t *b = bp + q * 4 * EMBER_QNR;
            uint8_t a4[4] = {0, 0, 0, 0};
            memcpy(a4, rows[r] + 4 * q, q + 1 < groups ? 4 : (size_t)tail);
            int32_t a0 = a4[0], a1 = a4[1], a2 = a4[2], a3 = a4[3];
            for (int c = 0; c < EMBER_QNR; c++)
                t[c] += a0 * b[4 * c] + a1 * b[4 * c + 1] + a2 * b[4 * c + 2] + a3 * b[4 * c + 3];
        }
    }
#endif
}

/* The exact sums of a tile (wrapping uint32: the true value fits int32), stored or
 * requantized; each step its own loop over the row, so each vectorizes. */
static void ember_qstore(const ember_qout *o, const int32_t *tile, long i0, long mr, long j0, long nr,
                         const int32_t *rowsum, const int32_t *alpha, const int32_t *beta, const int32_t *g)
{
    int32_t acc[EMBER_QNR];
    double v[EMBER_QNR], mrow[EMBER_QNR];
    for (long r = 0; r < mr; r++) {
        long i = i0 + r;
        uint32_t ri = (uint32_t)rowsum[i], ai = (uint32_t)alpha[i];
        const int32_t *t = tile + r * EMBER_QNR;
        for (long j = 0; j < nr; j++)
            acc[j] = (int32_t)((uint32_t)t[j] - (uint32_t)beta[j0 + j] * ri + ai * (uint32_t)g[j0 + j]);
        if (o->kind == 0) {
            int32_t *c = (int32_t *)o->c + i * o->c_rs + j0 * o->c_cs;
            if (o->c_cs == 1) memcpy(c, acc, (size_t)nr * sizeof *c);
            else for (long j = 0; j < nr; j++) c[j * o->c_cs] = acc[j];
            continue;
        }
        const double *m = o->mcol + j0;
        if (o->a_scale) {
            double ar = (double)o->a_scale[i];
            for (long j = 0; j < nr; j++) mrow[j] = ar * (double)o->b_scale[(j0 + j) * o->b_step] / o->y_scale;
            m = mrow;
        }
        for (long j = 0; j < nr; j++) v[j] = (double)acc[j];
        if (o->bias)
            for (long j = 0; j < nr; j++) v[j] += (double)o->bias[j0 + j];
        double lo = o->kind == 1 ? 0.0 : -128.0, hi = o->kind == 1 ? 255.0 : 127.0, yz = o->y_zero;
        for (long j = 0; j < nr; j++) {
            double q = nearbyint(v[j] * m[j]) + yz;
            q = q > lo ? q : lo;
            v[j] = q < hi ? q : hi;
        }
        long at = i * o->c_rs + j0 * o->c_cs, cs = o->c_cs;
        if (o->kind == 1 && cs == 1)
            for (long j = 0; j < nr; j++) ((uint8_t *)o->c)[at + j] = (uint8_t)v[j];
        else if (o->kind == 1)
            for (long j = 0; j < nr; j++) ((uint8_t *)o->c)[at + j * cs] = (uint8_t)v[j];
        else if (cs == 1)
            for (long j = 0; j < nr; j++) ((int8_t *)o->c)[at + j] = (int8_t)v[j];
        else
            for (long j = 0; j < nr; j++) ((int8_t *)o->c)[at + j * cs] = (int8_t)v[j];
    }
}

/* C = (A - za)(B - zb) for A_u [M][K] (rows a_rs apart) and packed B, in tiles of
 * EMBER_QMR rows x one 64-column panel split across threads. */
static void ember_qgemm(long M, long N, long K, const uint8_t *a, long a_rs, const int8_t *bp,
                        const int32_t *rowsum, const int32_t *alpha, const int32_t *beta, const int32_t *g,
                        const ember_qout *o, int nthreads)
{
    long groups = (K + 3) / 4, tail = K % 4 ? K % 4 : 4;
    long panels = (N + EMBER_QNR - 1) / EMBER_QNR, blocks = (M + EMBER_QMR - 1) / EMBER_QMR;
    (void)nthreads;
#pragma omp parallel for if (nthreads > 1) num_threads(nthreads) schedule(static)
    for (long t = 0; t < panels * blocks; t++) {
        long p = t / blocks, i0 = t % blocks * EMBER_QMR;
        long mr = M - i0 < EMBER_QMR ? M - i0 : EMBER_QMR, nr = N - p * EMBER_QNR;
        int32_t tile[EMBER_QMR * EMBER_QNR] __attribute__((aligned(64)));
        const uint8_t *rows[EMBER_QMR];
        for (long r = 0; r < EMBER_QMR; r++) rows[r] = a + (i0 + (r < mr ? r : 0)) * a_rs;
        ember_qtile(rows, groups, tail, bp + p * groups * 4 * EMBER_QNR, tile);
        ember_qstore(o, tile, i0, mr, p * EMBER_QNR, nr < EMBER_QNR ? nr : EMBER_QNR, rowsum, alpha, beta, g);
    }
}
"""


def pack_qpanels(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mirror of ember_qpack: B [K, N] as int8 (uint8 flipped by -128) in panels
    [ceil(N/64)][ceil(K/4)][64][4], and its column sums."""
    k, n = b.shape
    flipped = (b.astype(np.int32) - (128 if b.dtype == np.uint8 else 0)).astype(np.int8)
    groups, panels = -(-k // 4), -(-n // QNR)
    padded = np.zeros((groups * 4, panels * QNR), np.int8)
    padded[:k, :n] = flipped
    packed = padded.reshape(groups, 4, panels, QNR).transpose(2, 0, 3, 1)
    return np.ascontiguousarray(packed).reshape(-1), flipped.sum(axis=0, dtype=np.int32)


def qpanel_bytes(k: int, n: int) -> int:
    return -(-k // 4) * 4 * -(-n // QNR) * QNR
