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

/* Without OpenMP (AOT bundles are single-threaded) the pragmas are ignored and every
 * kernel runs on thread 0. */
#ifdef _OPENMP
#include <omp.h>
#define ember_thread_num() omp_get_thread_num()
#else
#define ember_thread_num() 0
#endif

/* EMBER_NR, EMBER_MR, the activation enum (EMBER_ACT_*) and the other constants shared with
 * Ember's Python side: generated from src/ember/codegen/c_constants.py. */
#include "ember_config.h"

typedef struct {
    const float *bias;     /* NULL, or bias[row] (bias_per_row) / bias[col] */
    int bias_per_row;
    const float *residual; /* NULL, or laid out like C with leading dimension ld_residual */
    long ld_residual;
    int act;
    float alpha, beta;
    /* grid_w > 0: C's columns are positions q of an output grid grid_w wide of which the
     * first out_w columns are kept; column q is stored at (q / grid_w) * out_w + q % grid_w
     * and the others are dropped (direct convolution computes on such a grid). The
     * residual is addressed the same way; the bias must be per row. */
    long grid_w, out_w;
    /* C stored transposed: element (i, j) at c[j * ldc + i] (the residual likewise); lets a
     * GEMM with pixels as rows write NCHW output directly. Bias per column only. */
    int transposed;
} ember_epilogue;

/* Packs columns [col0, col0 + 32) of a row-major K x N matrix into one zero-padded panel. */
void ember_pack_panel(float *panel, const float *b, long ldb, long K, long N, long col0);

/* The epilogue activation on one value. */
float ember_activate(float v, const ember_epilogue *ep);

/* The residual (NULL for none) and the activation of `ep` on n contiguous values; ep's bias
 * and residual fields are not used. */
void ember_finish_span(float *y, const float *residual, long n, const ember_epilogue *ep);

/* Writes panel columns [col0, col0 + 32) of B (K x N, zero beyond N) into `panel` [K][32]. */
typedef void (*ember_packer)(float *panel, const void *ctx, long col0);


/* B = im2col of one image group (NCHW): ctx is an ember_conv_geom; K = C * KH * KW and
 * N = OH * OW. Padding reads as zero. */
typedef struct {
    const float *x;
    long C, H, W, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW;
} ember_conv_geom;
void ember_pack_im2col(float *panel, const void *ctx, long col0);

/* B = im2col of one image group of a 3-D convolution (NCDHW): ctx is an ember_conv3d_geom;
 * K = C * KD * KH * KW (weights [M][C][KD][KH][KW]) and N = OD * OH * OW. */
typedef struct {
    const float *x;
    long C, D, H, W, KD, KH, KW, SD, SH, SW, PD, PH, PW, DD, DH, DW, OD, OH, OW;
} ember_conv3d_geom;
void ember_pack_im2col3d(float *panel, const void *ctx, long col0);

/* C[M, N] = A[M, K] * B[K, N] + epilogue, on `nthreads` OpenMP threads.
 * A: element (i, k) at a[(i / 8) * a_block + (i % 8) * a_rs + k * a_ks] (row-major: a_block =
 * 8 * lda, a_rs = lda, a_ks = 1; packed 8-row blocks: a_block = 8 * K, a_rs = 1, a_ks = 8).
 * B: pre-packed panels `bp` ([ceil(N/32)][K][32]); or `b_direct` read in place, row k at
 * b_direct + k * ldb, or at b_direct + koff[k] when `koff` is given (then reads may run up to
 * 31 floats past column N - 1: the caller pads); or panels produced by `pack`. `scratch`
 * holds ember_gemm_scratch_bytes(...) bytes. `ep` may be NULL. */
void ember_gemm(long M, long N, long K, const float *a, long a_rs, long a_ks, long a_block,
                const float *bp, ember_packer pack, const void *pack_ctx, const float *b_direct, long ldb,
                const int32_t *koff, float *c, long ldc, const ember_epilogue *ep, float *scratch, int nthreads);
long ember_gemm_scratch_bytes(long N, long K, int nthreads);
/* Columns [p0 * 32, p1 * 32) of C[M, N] = A B + epilogue on the calling thread, A's element (i, k)
 * at a[i * a_rs + aoff[k]] (a convolution's taps read in place from a channel-last map) and B
 * packed in 32-column panels of K rows each (bp: all of them). */
void ember_gemm_taps(long M, long N, long K, const float *a, long a_rs, const int32_t *aoff, const float *bp,
                     long p0, long p1, float *c, long ldc, const ember_epilogue *ep);
/* How many panels of K rows ember_gemm sweeps at a time (EMBER_CHUNK_BYTES of them: they stay
 * in L2 while the rows sweep them). */
long ember_gemm_chunk_panels(long K, long panels);

/* dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols, in 16 x 16 register blocks
 * (defined in ember_transpose.c; the depthwise kernel's channel-blocked path transposes the same way). */
void ember_transpose_f32(const float *src, long rows, long cols, long lds, float *dst, long ldd);
/* The same, and ember_finish_span, split across up to `nthreads` threads where the work is
 * large enough to pay for a parallel region (ember_transpose.c). */
void ember_transpose_f32_threads(const float *src, long rows, long cols, long lds, float *dst, long ldd, int nthreads);
void ember_finish_span_threads(float *y, const float *residual, long n, const ember_epilogue *ep, int nthreads);

/* Depthwise convolution's kernels specialised to a tap size and a stride pair (ember_depthwise.c:
 * 3x3 and 5x5 taps, any other size up to 8x8; strides 1 or 2 each way). The caller picks the
 * one for its geometry (codegen/kernels/layouts.py depthwise_kernel), which also names it to
 * the build: a model links only the kernels it uses. */
struct ember_dw_columns;
#define EMBER_DW_KERNEL_PARAMS \
    const ember_conv_geom *g, const float *xc, const float *wc, float b0, float *yc, const float *rc, \
    const ember_epilogue *ep, const struct ember_dw_columns *cols
typedef void (*ember_dw_kernel)(EMBER_DW_KERNEL_PARAMS);
void ember_dw_3x3_s11(EMBER_DW_KERNEL_PARAMS), ember_dw_3x3_s22(EMBER_DW_KERNEL_PARAMS),
    ember_dw_3x3_s21(EMBER_DW_KERNEL_PARAMS), ember_dw_3x3_s12(EMBER_DW_KERNEL_PARAMS),
    ember_dw_5x5_s11(EMBER_DW_KERNEL_PARAMS), ember_dw_5x5_s22(EMBER_DW_KERNEL_PARAMS),
    ember_dw_5x5_s21(EMBER_DW_KERNEL_PARAMS), ember_dw_5x5_s12(EMBER_DW_KERNEL_PARAMS),
    ember_dw_any_s11(EMBER_DW_KERNEL_PARAMS), ember_dw_any_s22(EMBER_DW_KERNEL_PARAMS),
    ember_dw_any_s21(EMBER_DW_KERNEL_PARAMS), ember_dw_any_s12(EMBER_DW_KERNEL_PARAMS);

/* Depthwise convolution of one image: one input and one output channel per group. `kernel`:
 * the specialised kernel of g's taps and strides, or NULL where g has none (strides past 2,
 * dilation, taps past 8x8: the general path). `scratch` holds
 * ember_depthwise_scratch_bytes(g, nthreads) bytes. */
void ember_depthwise(const ember_conv_geom *g, ember_dw_kernel kernel, const float *w, const float *bias,
                     const float *residual, float *y, const ember_epilogue *ep, float *scratch, int nthreads);
long ember_depthwise_scratch_bytes(const ember_conv_geom *g, int nthreads);

/* Direct convolution (equal strides, no dilation) of one image group; `a` holds the weights
 * row-major [M][C * KH * KW] (as stored), koff comes from ember_conv_direct_offsets, scratch holds
 * ember_conv_direct_scratch_bytes(g, M) bytes. */
long ember_conv_direct_scratch_bytes(const ember_conv_geom *g, long M);
void ember_conv_direct_offsets(const ember_conv_geom *g, int32_t *koff);
void ember_conv_direct(const ember_conv_geom *g, long M, const float *a, const int32_t *koff, const float *bias,
                       const float *residual, float *y, const ember_epilogue *ep, float *scratch, int nthreads);

/* Shallow convolution (groups == 1, no dilation, C * KH * KW <= EMBER_SHALLOW_MAX_K) of one
 * image, directly, output row by output row; `w` holds the weights row-major [M][C * KH * KW]
 * (as stored), scratch ember_conv_shallow_scratch_bytes(g, nthreads) bytes. */
long ember_conv_shallow_scratch_bytes(const ember_conv_geom *g, int nthreads);
void ember_conv_shallow(const ember_conv_geom *g, long M, const float *w, const float *bias, const float *residual,
                        float *y, const ember_epilogue *ep, float *scratch, int nthreads);

/* Convolution of one image group (no dilation) with the output pixels as the GEMM's rows, read in
 * place: the input copied channel-last into a zero-padded map, each 8-pixel run of an output
 * row multiplied through the taps' offsets into it by W^T packed tap-major ([KH * KW * C][M] in
 * 32-column panels), y stored NCHW from the tiles. `scratch` holds
 * ember_conv_taps_scratch_bytes(g) bytes. */
long ember_conv_taps_scratch_bytes(const ember_conv_geom *g);
void ember_conv_taps(const ember_conv_geom *g, long M, const float *w_panels, const float *bias,
                     const float *residual, float *y, const ember_epilogue *ep, float *scratch, int nthreads);

/* Im2row of one image (groups == 1) for a convolution whose GEMM takes pixels as rows:
 * rows[OH * OW][KH * KW * C], tap-major within a row; `hwc` holds
 * ember_conv_rows_scratch_floats(g) floats (the input channel-last). */
long ember_conv_rows_scratch_floats(const ember_conv_geom *g);
void ember_conv_rows(const ember_conv_geom *g, float *hwc, float *rows, int nthreads);

/* Winograd F(2x2, 3x3) convolution of one image group: 3x3 kernel, stride 1, no dilation, any
 * padding (the caller checks). `u` holds the weights transformed as G g G^T, [16][M][C]
 * (row-major per 4x4 position); scratch holds ember_winograd_scratch_bytes(g, M, nthreads) bytes. */
long ember_winograd_scratch_bytes(const ember_conv_geom *g, long M, int nthreads);
void ember_winograd(const ember_conv_geom *g, long M, const float *u, const float *bias, const float *residual,
                    float *y, const ember_epilogue *ep, float *scratch, int nthreads);
/* Winograd F(4x4, 3x3), channel-last (ember_winograd4.c), same conditions: `u` holds G g G^T
 * as [36][ceil(M/32)][Cp][32] panels (Cp = C rounded up to 16, zero rows past C); scratch holds
 * ember_winograd4_scratch_bytes(g, M, nthreads) bytes; ember_winograd4_block_tiles says how
 * many 4x4 tiles go in one block, ember_winograd4_tile_split whether threads split the tiles
 * (each its own blocks, start to end) rather than each block's 36 GEMMs. */
long ember_winograd4_block_tiles(long tiles, long C, long M, int nthreads);
int ember_winograd4_tile_split(long tiles, long C, long M, int nthreads);
long ember_winograd4_scratch_bytes(const ember_conv_geom *g, long M, int nthreads);
void ember_winograd4(const ember_conv_geom *g, long M, const float *u, const float *bias, const float *residual,
                     float *y, const ember_epilogue *ep, float *scratch, int nthreads);
/* The same with another kernel for the 16 GEMMs, O (M x EMBER_WINO_TB) = U[xi] (M x C) * V (C x
 * EMBER_WINO_TB, rows EMBER_WINO_TB apart), given `u` as passed and `gemm_floats` floats of the
 * calling thread's scratch (the bf16 Winograd's). */
typedef void (*ember_winograd_gemm)(long M, long C, const void *u, int xi, const float *v, float *o, float *scratch);
long ember_winograd_with_scratch_bytes(const ember_conv_geom *g, long M, long gemm_floats, int nthreads);
void ember_winograd_with(const ember_conv_geom *g, long M, const void *u, ember_winograd_gemm gemm, long gemm_floats,
                         const float *bias, const float *residual, float *y, const ember_epilogue *ep, float *scratch,
                         int nthreads);

/* The bf16 GEMM (precision="bf16", ember_gemm_bf16.c): both operands rounded to bfloat16 and
 * multiplied by pairs of k (vdpbf16ps where the CPU has AVX512-BF16, a portable path
 * otherwise), accumulated and stored in float32 with the epilogue (grid_w and transposed
 * unused). A: 8-row blocks of bf16 pairs `ap` ([ceil(M/8)][ceil(K/2)][8] words), or row-major
 * float `a` (leading dimension lda) converted into scratch. B: panels of bf16 pairs `bp`
 * ([ceil(N/32)][ceil(K/2)][32] words), or float panels from `pack`, or row-major float `b`
 * (row k at b + k * ldb), converted a chunk at a time. `scratch` holds
 * ember_gemm_bf16_scratch_bytes(M, N, K, ap != NULL, bp != NULL, pack != NULL, nthreads). */
void ember_gemm_bf16(long M, long N, long K, const uint32_t *ap, const float *a, long lda, const uint32_t *bp,
                     ember_packer pack, const void *pack_ctx, const float *b, long ldb, float *c, long ldc,
                     const ember_epilogue *ep, void *scratch, int nthreads);
long ember_gemm_bf16_scratch_bytes(long M, long N, long K, int a_packed, int b_packed, int b_repacked,
                                   int nthreads);
/* Rows [8 * block0, 8 * block1) of row-major A into bf16 pair blocks; K rows of B (leading
 * dimension ldb, ncols <= 32 columns) into one bf16 pair panel, zero-padded. */
void ember_bf16_pack_a(uint32_t *blocks, const float *a, long lda, long M, long K, long block0, long block1);
void ember_bf16_pack_panel(uint32_t *panel, const float *b, long ldb, long K, int ncols);
/* Winograd F(2x2, 3x3) with the 16 GEMMs in bf16: `u` holds G g G^T per position as the bf16
 * GEMM's A blocks, [16][ceil(M/8)][ceil(C/2)][8] words. */
long ember_winograd_bf16_scratch_bytes(const ember_conv_geom *g, long M, int nthreads);
void ember_winograd_bf16(const ember_conv_geom *g, long M, const uint32_t *u, const float *bias,
                         const float *residual, float *y, const ember_epilogue *ep, float *scratch, int nthreads);
/* 1 where this CPU runs vdpbf16ps (the bf16 GEMM takes its AVX512-BF16 path), else 0. */
int ember_bf16_native(void);

#endif
