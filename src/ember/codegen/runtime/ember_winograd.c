/* Winograd F(2x2, 3x3) convolution (3x3 kernel, stride 1, no dilation, one group; see
 * ember_gemm.h). Each 2x2 block of outputs (a "tile") comes from its 4x4 input patch d
 * through 16 products per input channel instead of 36, so the multiply-adds drop 2.25x.
 * The tiles go in blocks of EMBER_WINO_TB (one block per thread at a time), each in three
 * steps that stay in that thread's L2:
 *   1. input transform:  V[xi][c][t] = (B^T d B)[xi] for tile t's patch of channel c;
 *   2. 16 GEMMs:         O[xi] (M x TB) = U[xi] (M x C) * V[xi] (C x TB), with U = G g G^T
 *                        transformed at compile time ([16][M][C]) and V read in place, as
 *                        the GEMM reads a 1x1 convolution's input;
 *   3. output transform: y = A^T O A per tile, then bias, residual and activation.
 * The transform matrices hold only 0, +-1 and +-1/2, so results differ from direct
 * convolution by a few roundings (the sums run in another order). */
#include "ember_gemm.h"

/* EMBER_WINO_TB (tiles per block) and EMBER_LINE_FLOATS come from ember_config.h. */

/* `half`: floats of one half (even or odd columns) of a padded input row (TW + 1, rounded up). */
typedef struct { long TH, TW, T, blocks, half; } wino_plan;

static wino_plan plan_of(const ember_conv_geom *g)
{
    wino_plan p;
    p.TH = (g->OH + 1) / 2;
    p.TW = (g->OW + 1) / 2;
    p.T = p.TH * p.TW;
    p.blocks = (p.T + EMBER_WINO_TB - 1) / EMBER_WINO_TB;
    p.half = (p.TW + 1 + EMBER_LINE_FLOATS - 1) / EMBER_LINE_FLOATS * EMBER_LINE_FLOATS;
    return p;
}

/* One of V's (or O's) 16 planes for a block: rows x TB, plus a cache line so the 16
 * planes, written (read) side by side by the transforms, do not share L1 sets. */
static long plane_floats(long rows)
{
    return rows * EMBER_WINO_TB + EMBER_LINE_FLOATS;
}

/* Per thread: V and O of one block, and four input rows split in even and odd halves (also
 * the two output rows, split the same way). */
static long per_thread_floats(const ember_conv_geom *g, long M, const wino_plan *p)
{
    return 16 * (plane_floats(g->C) + plane_floats(M)) + 8 * p->half;
}

long ember_winograd_with_scratch_bytes(const ember_conv_geom *g, long M, long gemm_floats, int nthreads)
{
    wino_plan p = plan_of(g);
    int used = p.blocks < nthreads ? (int)p.blocks : nthreads;
    return (per_thread_floats(g, M, &p) + gemm_floats) * (used > 0 ? used : 1) * (long)sizeof(float);
}

long ember_winograd_scratch_bytes(const ember_conv_geom *g, long M, int nthreads)
{
    return ember_winograd_with_scratch_bytes(g, M, 0, nthreads);
}

/* Columns 2k and 2k + 1 of an input row (src at column -PW), zero outside the row. */
static inline void edge_pair(const ember_conv_geom *g, const float *src, long k, float *even, float *odd)
{
    long c0 = 2 * k - g->PW, c1 = c0 + 1;
    even[k] = c0 >= 0 && c0 < g->W ? src[2 * k] : 0.0f;
    odd[k] = c1 >= 0 && c1 < g->W ? src[2 * k + 1] : 0.0f;
}

/* Input rows 2 * ty - PH + i (i < 4) of one channel, zero-padded from input column -PW, split
 * into even and odd columns: rows[2 * i][k] = column 2k, rows[2 * i + 1][k] = column 2k + 1, so
 * tile tx's patch row i is (even[tx], odd[tx], even[tx + 1], odd[tx + 1]) and every access
 * in the transform has unit stride. `half` floats per split row. */
static void load_rows(const ember_conv_geom *g, const float *xc, long ty, long half, float *restrict rows)
{
    for (long i = 0; i < 4; i++) {
        float *even = rows + 2 * i * half, *odd = even + half;
        long ih = 2 * ty - g->PH + i;
        if (ih < 0 || ih >= g->H) {
            memset(even, 0, (size_t)(2 * half) * sizeof(float));
            continue;
        }
        const float *src = xc + ih * g->W - g->PW;
        /* Pairs k in [k0, k1) have both columns inside the row: no checks there. */
        long k0 = (g->PW + 1) / 2, k1 = (g->W + g->PW) / 2;
        if (k1 > half) k1 = half;
        if (k0 > k1) k0 = k1;
        for (long k = 0; k < k0; k++) edge_pair(g, src, k, even, odd);
        for (long k = k0; k < k1; k++) { even[k] = src[2 * k]; odd[k] = src[2 * k + 1]; }
        for (long k = k1; k < half; k++) edge_pair(g, src, k, even, odd);
    }
}

/* Tiles [tx0, tx1) of one channel's tile row into V (16 planes `plane` apart). */
static void transform_in(const float *restrict rows, long half, long tx0, long tx1, float *restrict v, long plane)
{
    const float *e0 = rows, *o0 = e0 + half, *e1 = o0 + half, *o1 = e1 + half;
    const float *e2 = o1 + half, *o2 = e2 + half, *e3 = o2 + half, *o3 = e3 + half;
    long n = tx1 - tx0;
    float *restrict v00 = v, *restrict v01 = v + plane, *restrict v02 = v + 2 * plane, *restrict v03 = v + 3 * plane;
    float *restrict v10 = v + 4 * plane, *restrict v11 = v + 5 * plane, *restrict v12 = v + 6 * plane, *restrict v13 = v + 7 * plane;
    float *restrict v20 = v + 8 * plane, *restrict v21 = v + 9 * plane, *restrict v22 = v + 10 * plane, *restrict v23 = v + 11 * plane;
    float *restrict v30 = v + 12 * plane, *restrict v31 = v + 13 * plane, *restrict v32 = v + 14 * plane, *restrict v33 = v + 15 * plane;
    for (long k = 0; k < n; k++) {
        long x = tx0 + k;
        /* Rows of B^T d for the patch's four columns (d[i][j] = e_i[x], o_i[x], e_i[x+1], o_i[x+1]). */
        float t00 = e0[x] - e2[x], t01 = o0[x] - o2[x], t02 = e0[x + 1] - e2[x + 1], t03 = o0[x + 1] - o2[x + 1];
        float t10 = e1[x] + e2[x], t11 = o1[x] + o2[x], t12 = e1[x + 1] + e2[x + 1], t13 = o1[x + 1] + o2[x + 1];
        float t20 = e2[x] - e1[x], t21 = o2[x] - o1[x], t22 = e2[x + 1] - e1[x + 1], t23 = o2[x + 1] - o1[x + 1];
        float t30 = e1[x] - e3[x], t31 = o1[x] - o3[x], t32 = e1[x + 1] - e3[x + 1], t33 = o1[x + 1] - o3[x + 1];
        /* ... times B. */
        v00[k] = t00 - t02; v01[k] = t01 + t02; v02[k] = t02 - t01; v03[k] = t01 - t03;
        v10[k] = t10 - t12; v11[k] = t11 + t12; v12[k] = t12 - t11; v13[k] = t11 - t13;
        v20[k] = t20 - t22; v21[k] = t21 + t22; v22[k] = t22 - t21; v23[k] = t21 - t23;
        v30[k] = t30 - t32; v31[k] = t31 + t32; v32[k] = t32 - t31; v33[k] = t31 - t33;
    }
}

/* n tiles of one output channel's tile row from O (16 planes `plane` apart): the two output
 * rows split into even and odd columns (top_even[k] = column 2k, ...), bias added. */
static void transform_out(const float *restrict o, long plane, long n, float bias, float *restrict te,
                          float *restrict to, float *restrict be, float *restrict bo)
{
    for (long k = 0; k < n; k++) {
        float s[4][4], t[2][4];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) s[i][j] = o[(4 * i + j) * plane + k];
        for (int j = 0; j < 4; j++) {  /* A^T s */
            t[0][j] = s[0][j] + s[1][j] + s[2][j];
            t[1][j] = s[1][j] - s[2][j] - s[3][j];
        }
        te[k] = t[0][0] + t[0][1] + t[0][2] + bias;  /* (A^T s) A */
        to[k] = t[0][1] - t[0][2] - t[0][3] + bias;
        be[k] = t[1][0] + t[1][1] + t[1][2] + bias;
        bo[k] = t[1][1] - t[1][2] - t[1][3] + bias;
    }
}

/* The float32 GEMMs (U as float [16][M][C]). */
static void winograd_gemm_f32(long M, long C, const void *u, int xi, const float *v, float *o, float *scratch)
{
    (void)scratch;
    ember_gemm(M, EMBER_WINO_TB, C, (const float *)u + xi * M * C, C, 1, EMBER_MR * C, NULL, NULL, NULL, v,
               EMBER_WINO_TB, NULL, o, EMBER_WINO_TB, NULL, NULL, 1);
}

static void run_block(const ember_conv_geom *g, const wino_plan *p, long M, const void *u, ember_winograd_gemm gemm,
                      const float *bias, const float *residual, float *y, const ember_epilogue *ep, long block,
                      float *mine)
{
    const long TB = EMBER_WINO_TB, C = g->C, OH = g->OH, OW = g->OW;
    long vplane = plane_floats(C), oplane = plane_floats(M);
    float *V = mine, *O = V + 16 * vplane, *rows = O + 16 * oplane;
    long t0 = block * TB, t1 = t0 + TB < p->T ? t0 + TB : p->T;
    if (t1 - t0 < TB)  /* a short last block: its extra columns are computed, never stored */
        for (long xi = 0; xi < 16; xi++)
            for (long c = 0; c < C; c++)
                memset(V + xi * vplane + c * TB + (t1 - t0), 0, (size_t)(TB - (t1 - t0)) * sizeof(float));
    for (long c = 0; c < C; c++)
        for (long t = t0; t < t1;) {
            long ty = t / p->TW, tx0 = t % p->TW, tx1 = tx0 + (t1 - t) < p->TW ? tx0 + (t1 - t) : p->TW;
            load_rows(g, g->x + c * g->H * g->W, ty, p->half, rows);
            transform_in(rows, p->half, tx0, tx1, V + c * TB + (t - t0), vplane);
            t += tx1 - tx0;
        }
    for (int xi = 0; xi < 16; xi++) gemm(M, C, u, xi, V + xi * vplane, O + xi * oplane, rows + 8 * p->half);
    float *half_rows[4] = { rows, rows + p->half, rows + 2 * p->half, rows + 3 * p->half };
    for (long m = 0; m < M; m++)
        for (long t = t0; t < t1;) {
            long ty = t / p->TW, tx0 = t % p->TW, n = t1 - t < p->TW - tx0 ? t1 - t : p->TW - tx0;
            transform_out(O + m * TB + (t - t0), oplane, n, bias ? bias[m] : 0.0f, half_rows[0], half_rows[1],
                          half_rows[2], half_rows[3]);
            long ox = 2 * tx0, width = 2 * n < OW - ox ? 2 * n : OW - ox;
            for (long i = 0; i < 2 && 2 * ty + i < OH; i++) {
                float *dst = y + m * OH * OW + (2 * ty + i) * OW + ox;
                const float *even = half_rows[2 * i], *odd = half_rows[2 * i + 1];
                for (long k = 0; k < width / 2; k++) { dst[2 * k] = even[k]; dst[2 * k + 1] = odd[k]; }
                if (width % 2) dst[width - 1] = even[width / 2];
                ember_finish_span(dst, residual ? residual + (dst - y) : NULL, width, ep);
            }
            t += n;
        }
}

void ember_winograd_with(const ember_conv_geom *g, long M, const void *u, ember_winograd_gemm gemm, long gemm_floats,
                         const float *bias, const float *residual, float *y, const ember_epilogue *ep, float *scratch,
                         int nthreads)
{
    wino_plan p = plan_of(g);
    long per_thread = per_thread_floats(g, M, &p) + gemm_floats;
    #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) if(nthreads > 1 && p.blocks > 1)
    for (long block = 0; block < p.blocks; block++)
        run_block(g, &p, M, u, gemm, bias, residual, y, ep, block, scratch + ember_thread_num() * per_thread);
}

void ember_winograd(const ember_conv_geom *g, long M, const float *u, const float *bias, const float *residual,
                    float *y, const ember_epilogue *ep, float *scratch, int nthreads)
{
    ember_winograd_with(g, M, u, winograd_gemm_f32, 0, bias, residual, y, ep, scratch, nthreads);
}
