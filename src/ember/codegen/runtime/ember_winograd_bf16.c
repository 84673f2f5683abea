/* Winograd F(2x2, 3x3) with its 16 GEMMs on the bf16 GEMM (precision="bf16"): the transforms
 * as in ember_winograd.c, in float32; U = G g G^T arrives as the bf16 GEMM's A blocks per
 * position ([16][ceil(M/8)][ceil(C/2)][8] words) and each plane of V is rounded to bf16 as
 * the GEMM packs it, into one panel of the thread's scratch. See ember_gemm.h. */
#include "ember_gemm.h"

static long winograd_bf16_panel_floats(const ember_conv_geom *g)
{
    return (g->C + 1) / 2 * EMBER_WINO_TB;
}

static void winograd_gemm_bf16(long M, long C, const void *u, int xi, const float *v, float *o, float *scratch)
{
    long words = (M + EMBER_MR - 1) / EMBER_MR * ((C + 1) / 2) * EMBER_MR;
    ember_gemm_bf16(M, EMBER_WINO_TB, C, (const uint32_t *)u + xi * words, NULL, 0, NULL, NULL, NULL, v,
                    EMBER_WINO_TB, o, EMBER_WINO_TB, NULL, scratch, 1);
}

long ember_winograd_bf16_scratch_bytes(const ember_conv_geom *g, long M, int nthreads)
{
    return ember_winograd_with_scratch_bytes(g, M, winograd_bf16_panel_floats(g), nthreads);
}

void ember_winograd_bf16(const ember_conv_geom *g, long M, const uint32_t *u, const float *bias,
                         const float *residual, float *y, const ember_epilogue *ep, float *scratch, int nthreads)
{
    ember_winograd_with(g, M, u, winograd_gemm_bf16, winograd_bf16_panel_floats(g), bias, residual, y, ep, scratch,
                        nthreads);
}
