/* Ember GEMM core: register-tiled micro-kernels over 32-column packed B panels.
 *
 * C[MR x 32] = sum_k A[i, k] * Bp[k, 0..31], A addressed through (row stride, k stride) so
 * the same kernel reads row-major activations (FC: strides lda, 1) and compile-time packed
 * weights (conv: strides 1, 8). GCC/Clang vector extensions let the compiler pick zmm on
 * AVX-512, ymm pairs on AVX2 and NEON quads on AArch64 from one source.
 * The epilogue (bias per row or column, residual, activation) runs on each tile while it is
 * still in L1, so fused ops cost no extra pass over memory.
 * The functions are defined in ember_gemm.c, compiled once per machine and linked into every
 * model library, which keeps model compile times short. */
#ifndef EMBER_GEMM_H
#define EMBER_GEMM_H

#include <stdint.h>
#include <string.h>
#include <math.h>

#define EMBER_NR 32
#define EMBER_MR 8

enum { EMBER_ACT_NONE = 0, EMBER_ACT_RELU, EMBER_ACT_CLIP, EMBER_ACT_LEAKY_RELU, EMBER_ACT_SIGMOID,
       EMBER_ACT_TANH, EMBER_ACT_HARD_SIGMOID };

typedef struct {
    const float *bias;     /* NULL, or bias[row] (bias_per_row) / bias[col] */
    int bias_per_row;
    const float *residual; /* NULL, or laid out like C with leading dimension ld_residual */
    long ld_residual;
    int act;
    float alpha, beta;
} ember_epilogue;

/* C[mr x ncols] (leading dimension ldc) = A * Bp, then the epilogue; row0/col0 locate the
 * tile in the whole output for bias and residual. */
void ember_tile_rows(int mr, long kc, const float *a, long a_rs, long a_ks, const float *bp,
                     float *c, long ldc, int ncols, const ember_epilogue *ep, long row0, long col0);

/* Packs columns [col0, col0 + 32) of a row-major K x N matrix into one zero-padded panel. */
void ember_pack_panel(float *panel, const float *b, long ldb, long K, long N, long col0);

/* The epilogue activation on one value. */
float ember_activate(float v, const ember_epilogue *ep);

#endif
