/* Shallow convolutions of the kernel library (ember_conv_shallow; see ember_gemm.h): a file of
 * its own, so that a model without such a layer does not wait for gcc on its tiles (half of
 * what ember_conv.c took) when the library is first built. */
#define EMBER_SIMD_BUILTINS 1 /* ember_simd.h: no <immintrin.h> needed (compile time) */
#include "ember_gemm.h"
#include "ember_math.h"
#include "ember_simd.h"

/* Shallow convolutions (groups == 1, no dilation, a reduction K = C * KH * KW of at most
 * EMBER_SHALLOW_MAX_K: a network's first layer over 3 image channels) computed directly, one
 * output row at a time. The GEMM paths spend little on the multiply-adds here (K = 27 is a few
 * per output) and much on the rest: conv_direct stores its tiles through a grid a few columns
 * wider than the output, so every tile row lands misaligned (28% of MobileNetV2's first layer,
 * 3 -> 32 channels, 224 -> 112, against 41% in its multiply-adds), after building phase planes
 * of the whole input (10%). Here each output row builds the phase rows it reads (for each channel and kernel
 * row, the padded input row split by column phase: SW rows of `wph` floats), which stay in L1,
 * and tiles of 4 output channels by up to SHALLOW_NV vectors of pixels accumulate all K taps in
 * registers (tap (c, u, v) of output column ox is phase row (c, u, v % SW) at ox + v / SW), with
 * the bias, and store whole output rows of y, aligned where the rows are. */
#define SHALLOW_MB 4
#if EMBER_VN_LANES == 16
#define SHALLOW_NV 6  /* 24 accumulators, 4 weights and a row vector: 29 of 32 registers */
#else
#define SHALLOW_NV 2  /* 16 registers: 8 accumulators */
#endif

typedef struct { long wph, rows, floats; } shallow_layout;

/* Phase rows of one output row: C * KH * SW rows of wph floats, wph covering the output row
 * rounded up to whole vectors of the widest target (EMBER_MAX_VN_LANES) plus the taps' reach,
 * rounded up to whole vectors again, so that the taps without a column offset load aligned. */
static shallow_layout shallow_plan(const ember_conv_geom *g)
{
    shallow_layout l;
    long lanes = EMBER_MAX_VN_LANES;
    l.wph = ((g->OW + lanes - 1) / lanes * lanes + (g->KW - 1) / g->SW + lanes - 1) / lanes * lanes;
    l.rows = g->C * g->KH * g->SW;
    l.floats = l.rows * l.wph;
    return l;
}

long ember_conv_shallow_scratch_bytes(const ember_conv_geom *g, int nthreads)
{
    return shallow_plan(g).floats * (nthreads > 1 ? nthreads : 1) * (long)sizeof(float);
}

/* The phase rows of output row oh: row ((c * KH + u) * SW + b), column t holds padded input
 * column t * SW + b of input row oh * SH - PH + u (zero in the padding). */
static void shallow_fill(const ember_conv_geom *g, const shallow_layout *l, long oh, float *rows)
{
    long S = g->SW;
    for (long c = 0; c < g->C; c++)
        for (long u = 0; u < g->KH; u++) {
            long ih = oh * g->SH - g->PH + u;
            for (long b = 0; b < S; b++) {
                float *row = rows + ((c * g->KH + u) * S + b) * l->wph;
                if (ih < 0 || ih >= g->H) { memset(row, 0, (size_t)l->wph * sizeof(float)); continue; }
                /* Phase column t reads input column t * S + b - PW: in range for t in [t0, t1). */
                long t0 = g->PW - b > 0 ? (g->PW - b + S - 1) / S : 0;
                long t1 = g->W - 1 + g->PW - b < 0 ? 0 : (g->W - 1 + g->PW - b) / S + 1;
                if (t1 > l->wph) t1 = l->wph;
                if (t0 > t1) t0 = t1;
                const float *src = g->x + (c * g->H + ih) * g->W + b - g->PW;
                for (long t = 0; t < t0; t++) row[t] = 0.0f;
                if (S == 1) memcpy(row + t0, src + t0, (size_t)(t1 - t0) * sizeof(float));
                else if (S == 2) for (long t = t0; t < t1; t++) row[t] = src[2 * t];
                else for (long t = t0; t < t1; t++) row[t] = src[t * S];
                for (long t = t1; t < l->wph; t++) row[t] = 0.0f;
            }
        }
}

/* A tile's last, partial columns (`cols` of them): apart, so that the whole tiles keep their
 * accumulators in registers. */
static __attribute__((noinline)) void shallow_store_partial(const ember_vn *acc, int mb, int nv, long cols, float *y,
                                                            long ld)
{
    for (int i = 0; i < mb; i++)
        for (int v = 0; v < nv; v++) {
            long left = cols - v * EMBER_VN_LANES;
            float *dst = y + i * ld + v * EMBER_VN_LANES;
            if (left >= EMBER_VN_LANES) vn_store(dst, acc[i * SHALLOW_NV + v]);
            else if (left > 0) vn_store_masked(dst, (1u << left) - 1u, acc[i * SHALLOW_NV + v]);
        }
}

/* One tile: output channels m .. m + SHALLOW_MB - 1 (weight rows w, K apart; rows past M repeat
 * the last one and are not stored: `mb` are), NV vectors of pixels from tap pointers `taps`
 * (each already at the tile's first column), `cols` of them stored at y (rows `ld` apart).
 * act: the epilogue's activation where it runs in registers, else EMBER_ACT_NONE. */
static inline __attribute__((always_inline)) void shallow_tile(const float *const *taps, long K, const float *w,
                                                               const float *bias, int mb, int NV, long cols, float *y,
                                                               long ld, int act, float alpha, float beta)
{
    ember_vn acc[SHALLOW_MB][SHALLOW_NV];
    const float *wr[SHALLOW_MB];
    for (int i = 0; i < SHALLOW_MB; i++) {
        int r = i < mb ? i : mb - 1;
        wr[i] = w + r * K;
        ember_vn b0 = vn_splat(bias ? bias[r] : 0.0f);
        for (int v = 0; v < NV; v++) acc[i][v] = b0;
    }
    for (long k = 0; k < K; k++) {
        ember_vn wk[SHALLOW_MB];
        for (int i = 0; i < SHALLOW_MB; i++) wk[i] = vn_broadcast(wr[i][k]);
        const float *p = taps[k];
        for (int v = 0; v < NV; v++) {
            ember_vn b = vn_load(p + v * EMBER_VN_LANES);
            for (int i = 0; i < SHALLOW_MB; i++) acc[i][v] += wk[i] * b;
        }
    }
    /* Constant loop bounds throughout: the accumulators stay in registers. */
    ember_vn lo = vn_act_low(act, alpha), hi = vn_splat(beta);
    for (int i = 0; i < SHALLOW_MB; i++)
        for (int v = 0; v < NV; v++) acc[i][v] = vn_activate(acc[i][v], act, lo, hi);
    if (cols >= NV * EMBER_VN_LANES) {
        for (int i = 0; i < SHALLOW_MB; i++)
            if (i < mb)
                for (int v = 0; v < NV; v++) vn_store(y + i * ld + v * EMBER_VN_LANES, acc[i][v]);
    } else {
        shallow_store_partial(&acc[0][0], mb, NV, cols, y, ld);
    }
}

static void shallow_tiles(const float *const *taps, long K, const float *w, const float *bias, int mb, int nv,
                          long cols, float *y, long ld, int act, float alpha, float beta)
{
#define SHALLOW_CASE(N) case N: shallow_tile(taps, K, w, bias, mb, N, cols, y, ld, act, alpha, beta); break;
    switch (nv) {
    SHALLOW_CASE(1)
    SHALLOW_CASE(2)
#if SHALLOW_NV > 2
    SHALLOW_CASE(3)
    SHALLOW_CASE(4)
    SHALLOW_CASE(5)
    SHALLOW_CASE(6)
#endif
    default: break;
    }
#undef SHALLOW_CASE
}

void ember_conv_shallow(const ember_conv_geom *g, long M, const float *w, const float *bias, const float *residual,
                        float *y, const ember_epilogue *ep, float *scratch, int nthreads)
{
    shallow_layout l = shallow_plan(g);
    long K = g->C * g->KH * g->KW, plane = g->OH * g->OW;
    if (K > EMBER_SHALLOW_MAX_K) return;  /* the caller checks (conv.py); never overrun `taps` */
    long koff[EMBER_SHALLOW_MAX_K];
    for (long c = 0; c < g->C; c++)
        for (long u = 0; u < g->KH; u++)
            for (long v = 0; v < g->KW; v++)
                koff[(c * g->KH + u) * g->KW + v] = ((c * g->KH + u) * g->SW + v % g->SW) * l.wph + v / g->SW;
    /* Relu, clip and leaky relu run on the registers; anything else, or a residual, in a pass
     * over each stored row while it is in L1. */
    int in_registers = !residual && (ep->act == EMBER_ACT_NONE || ep->act == EMBER_ACT_RELU ||
                                     ep->act == EMBER_ACT_CLIP || ep->act == EMBER_ACT_LEAKY_RELU);
    int act = in_registers ? ep->act : EMBER_ACT_NONE;
    /* The row's vectors in nearly equal tiles of at most SHALLOW_NV (7 vectors: 4 + 3). */
    long vectors = (g->OW + EMBER_VN_LANES - 1) / EMBER_VN_LANES;
    long tiles = (vectors + SHALLOW_NV - 1) / SHALLOW_NV;
    int parts = nthreads > 1 ? nthreads : 1;
    #pragma omp parallel for num_threads(nthreads) schedule(static) if(nthreads > 1)
    for (int part = 0; part < parts; part++) {
        float *rows = scratch + part * l.floats;
        const float *taps[EMBER_SHALLOW_MAX_K];
        for (long oh = g->OH * part / parts; oh < g->OH * (part + 1) / parts; oh++) {
            shallow_fill(g, &l, oh, rows);
            float *yrow = y + oh * g->OW;
            long v0 = 0;
            for (long t = 0; t < tiles; t++) {
                int nv = (int)(vectors / tiles + (t < vectors % tiles));
                long col = v0 * EMBER_VN_LANES, cols = g->OW - col;
                for (long k = 0; k < K; k++) taps[k] = rows + koff[k] + col;
                for (long m = 0; m < M; m += SHALLOW_MB)
                    shallow_tiles(taps, K, w + m * K, bias ? bias + m : NULL,
                                  (int)(M - m < SHALLOW_MB ? M - m : SHALLOW_MB), nv, cols, yrow + m * plane + col,
                                  plane, act, ep->alpha, ep->beta);
                v0 += nv;
            }
            if (!in_registers)
                for (long m = 0; m < M; m++)
                    ember_finish_span(yrow + m * plane, residual ? residual + m * plane + oh * g->OW : NULL, g->OW, ep);
        }
    }
}
