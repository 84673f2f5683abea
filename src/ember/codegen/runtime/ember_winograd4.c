/* Winograd F(4x4, 3x3) convolution, channel-last (3x3 kernel, stride 1, no dilation, one group;
 * see ember_gemm.h). Each 4x4 block of outputs (a "tile") comes from its 6x6 input patch
 * through 36 products per input channel instead of 144: the multiply-adds drop 4x (F(2x2, 3x3)
 * in ember_winograd.c: 2.25x).
 *
 * Everything runs with channels innermost, so the transforms are plain vector arithmetic over
 * EMBER_VN_LANES channels at a time and the 36 GEMMs take the tiles as rows and the output
 * channels as their 32-wide columns (no padding of a few tiles up to a 32-column panel: a 14x14
 * map has 16 tiles):
 *   0. the input goes channel-last and zero-padded into `xp` [Hp][Wp][Cp] (Cp: C rounded up to
 *      16, so any vector width divides it);
 *   1. input transform, per tile:  V[xi][t][c] = (B^T d B)[xi] of tile t's patch d;
 *   2. 36 GEMMs:                   O[xi] (tiles x M) = V[xi] (tiles x Cp) * U[xi] (Cp x M), U = G g
 *                                  G^T packed at compile time as 32-column panels per xi;
 *   3. output transform, per tile: y = A^T O A + bias, channel-last into `yc` [OH * OW][M];
 *   4. yc transposed into NCHW y, then residual and activation.
 * Tiles go in blocks small enough that V and O stay in L2 (or one block where the whole map
 * is small, so each U[xi] is read once); each phase is a parallel loop (tiles, or the 36
 * GEMMs). The transform matrices (points 0, +-1, +-2) hold small integers and 1/4, 1/6, 1/12,
 * 1/24 (in G, applied in float64 at compile time), so results differ from direct convolution
 * by a few more roundings than F(2x2, 3x3)'s. */
#include "ember_gemm.h"
#include "ember_simd.h"

/* Mirrored by Winograd4Layout (kernels/layouts.py). */
static long w4_round16(long n) { return (n + 15) / 16 * 16; }

/* Bytes of V and O per tile. */
static long w4_tile_bytes(long C, long M) { return 36 * (w4_round16(C) + w4_round16(M)) * (long)sizeof(float); }

int ember_winograd4_tile_split(long tiles, long C, long M, int nthreads)
{
    if (nthreads <= 1 || tiles < 2L * EMBER_MR * nthreads) return 0;
    long u_bytes = 36 * w4_round16(C) * ((M + EMBER_NR - 1) / EMBER_NR * EMBER_NR) * (long)sizeof(float);
    return u_bytes < tiles * w4_tile_bytes(C, M);
}

long ember_winograd4_block_tiles(long tiles, long C, long M, int nthreads)
{
    long per_tile = w4_tile_bytes(C, M);
    if (ember_winograd4_tile_split(tiles, C, M, nthreads)) {
        /* Each thread's share of the tiles in as few blocks as keep its V and O in L2, the
         * blocks of nearly equal size. */
        long share = (tiles + nthreads - 1) / nthreads, most = EMBER_WINO4_BLOCK_BYTES / per_tile;
        if (most < EMBER_MR) most = EMBER_MR;
        long blocks = (share + most - 1) / most;
        return (share + blocks - 1) / blocks;
    }
    if (tiles * per_tile <= EMBER_WINO4_WHOLE_BYTES) return tiles;
    long block = EMBER_WINO4_BLOCK_BYTES / per_tile / EMBER_MR * EMBER_MR;
    return block < EMBER_MR ? EMBER_MR : block;
}

typedef struct { long TH, TW, T, TB, Cp, Mp, Hp, Wp, gemms; int split, teams; } w4_plan;

static w4_plan w4_plan_of(const ember_conv_geom *g, long M, int nthreads)
{
    w4_plan p;
    p.TH = (g->OH + 3) / 4;
    p.TW = (g->OW + 3) / 4;
    p.T = p.TH * p.TW;
    p.TB = ember_winograd4_block_tiles(p.T, g->C, M, nthreads);
    p.split = ember_winograd4_tile_split(p.T, g->C, M, nthreads);
    p.teams = p.split ? nthreads : 1;  /* sets of V and O in scratch */
    p.Cp = w4_round16(g->C);
    p.Mp = w4_round16(M);
    p.Hp = 4 * p.TH + 2;
    p.Wp = 4 * p.TW + 2;
    p.gemms = 36;
    return p;
}

long ember_winograd4_scratch_bytes(const ember_conv_geom *g, long M, int nthreads)
{
    w4_plan p = w4_plan_of(g, M, nthreads);
    long floats = p.Hp * p.Wp * p.Cp + p.teams * 36 * p.TB * (p.Cp + p.Mp) + g->OH * g->OW * p.Mp;
    return floats * (long)sizeof(float);
}

/* B^T applied along one axis of the 6x6 patch: in[k * stride] -> out[k * stride]. */
static inline __attribute__((always_inline)) void w4_bt(const ember_vn *in, long is, ember_vn *out, long os)
{
    ember_vn d0 = in[0], d1 = in[is], d2 = in[2 * is], d3 = in[3 * is], d4 = in[4 * is], d5 = in[5 * is];
    ember_vn four = vn_splat(4.0f), five = vn_splat(5.0f), two = vn_splat(2.0f);
    ember_vn a = d4 - four * d2, b = d3 - four * d1, c = d4 - d2, e = two * (d3 - d1);
    out[0] = four * d0 - five * d2 + d4;
    out[os] = a + b;
    out[2 * os] = a - b;
    out[3 * os] = c + e;
    out[4 * os] = c - e;
    out[5 * os] = four * d1 - five * d3 + d5;
}

/* A^T applied along one axis of a 6x6 block: in[k * is] (k < 6) -> out[k * os] (k < 4). */
static inline __attribute__((always_inline)) void w4_at(const ember_vn *in, long is, ember_vn *out, long os)
{
    ember_vn s0 = in[0], s1 = in[is], s2 = in[2 * is], s3 = in[3 * is], s4 = in[4 * is], s5 = in[5 * is];
    ember_vn p12 = s1 + s2, m12 = s1 - s2, p34 = s3 + s4, m34 = s3 - s4;
    out[0] = s0 + p12 + p34;
    out[os] = m12 + vn_splat(2.0f) * m34;
    out[2 * os] = p12 + vn_splat(4.0f) * p34;
    out[3 * os] = m12 + vn_splat(8.0f) * m34 + s5;
}

/* Phase 0: x (C planes of H x W) channel-last into xp, zero around it and past channel C. */
static void w4_pad_input(const ember_conv_geom *g, const w4_plan *p, float *xp, int nthreads)
{
    long row = p->Wp * p->Cp;
    #pragma omp parallel for num_threads(nthreads) schedule(static) if(nthreads > 1)
    for (long r = 0; r < p->Hp; r++) {
        float *dst = xp + r * row;
        long ih = r - g->PH;
        if (ih < 0 || ih >= g->H) { memset(dst, 0, (size_t)row * sizeof(float)); continue; }
        long lo = g->PW, hi = g->PW + g->W < p->Wp ? g->PW + g->W : p->Wp;  /* columns holding input */
        memset(dst, 0, (size_t)(lo * p->Cp) * sizeof(float));
        memset(dst + hi * p->Cp, 0, (size_t)((p->Wp - hi) * p->Cp) * sizeof(float));
        if (p->Cp != g->C)
            for (long s = lo; s < hi; s++) memset(dst + s * p->Cp + g->C, 0, (size_t)(p->Cp - g->C) * sizeof(float));
        ember_transpose_f32(g->x + ih * g->W, g->C, hi - lo, g->H * g->W, dst + lo * p->Cp, p->Cp);
    }
}

/* Phase 1: tile t (block-local tl) of xp into V ([36][TB][Cp]). */
static void w4_transform_in(const w4_plan *p, const float *xp, long t, long tl, float *V)
{
    long ty = t / p->TW, tx = t % p->TW;
    const float *patch = xp + ((4 * ty) * p->Wp + 4 * tx) * p->Cp;
    long plane = p->TB * p->Cp;
    for (long c = 0; c < p->Cp; c += EMBER_VN_LANES) {
        ember_vn d[36], t_[36];
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 6; j++) d[6 * i + j] = vn_load(patch + (i * p->Wp + j) * p->Cp + c);
        for (int j = 0; j < 6; j++) w4_bt(d + j, 6, t_ + j, 6);      /* B^T d: down the columns */
        for (int i = 0; i < 6; i++) w4_bt(t_ + 6 * i, 1, d + 6 * i, 1);  /* (B^T d) B: along the rows */
        for (int xi = 0; xi < 36; xi++) vn_store(V + xi * plane + tl * p->Cp + c, d[xi]);
    }
}

/* Phase 3: tile t (block-local tl) from O ([36][TB][Mp]) into yc ([OH * OW][Mp]), bias added. */
static void w4_transform_out(const ember_conv_geom *g, const w4_plan *p, long M, const float *O, const float *bias,
                             long t, long tl, float *yc)
{
    long ty = t / p->TW, tx = t % p->TW, plane = p->TB * p->Mp;
    long rows = g->OH - 4 * ty < 4 ? g->OH - 4 * ty : 4, cols = g->OW - 4 * tx < 4 ? g->OW - 4 * tx : 4;
    for (long m = 0; m < p->Mp; m += EMBER_VN_LANES) {
        ember_vn s[36], t_[24], y[16];
        for (int xi = 0; xi < 36; xi++) s[xi] = vn_load(O + xi * plane + tl * p->Mp + m);
        for (int j = 0; j < 6; j++) w4_at(s + j, 6, t_ + j, 6);       /* A^T s: 4 rows of 6 */
        for (int i = 0; i < 4; i++) w4_at(t_ + 6 * i, 1, y + 4 * i, 1);  /* (A^T s) A */
        long left = M - m;  /* the bias past channel M reads as zero */
        ember_vn b = !bias || left <= 0 ? vn_splat(0.0f)
                     : left >= EMBER_VN_LANES ? vn_load(bias + m) : vn_load_masked(bias + m, (1u << left) - 1u);
        for (long i = 0; i < rows; i++)
            for (long j = 0; j < cols; j++)
                vn_store(yc + ((4 * ty + i) * g->OW + 4 * tx + j) * p->Mp + m, y[4 * i + j] + b);
    }
}

/* Phase 2, one of the 36 GEMMs: O[xi] (n tiles x M) = V[xi] (n x Cp) * U[xi]. */
static void w4_gemm(const w4_plan *p, long M, const float *u, const float *V, float *O, long n, long xi)
{
    long u_plane = (M + EMBER_NR - 1) / EMBER_NR * p->Cp * EMBER_NR;
    ember_gemm(n, M, p->Cp, V + xi * p->TB * p->Cp, p->Cp, 1, EMBER_MR * p->Cp, u + xi * u_plane, NULL, NULL, NULL, 0,
               NULL, O + xi * p->TB * p->Mp, p->Mp, NULL, NULL, 1);
}

/* Phase 4 for output pixels [q0, q1) of channels [m0, m0 + mc): yc transposed into NCHW y,
 * each channel's run then finished (residual, activation) while in cache. */
static void w4_store(const ember_conv_geom *g, const w4_plan *p, long M, const float *yc, const float *residual,
                     float *y, const ember_epilogue *ep, long q0, long q1, long m0)
{
    long plane = g->OH * g->OW, mc = M - m0 < 16 ? M - m0 : 16;
    ember_transpose_f32(yc + q0 * p->Mp + m0, q1 - q0, mc, p->Mp, y + m0 * plane + q0, plane);
    if (residual || ep->act != EMBER_ACT_NONE)
        for (long m = m0; m < m0 + mc; m++)
            ember_finish_span(y + m * plane + q0, residual ? residual + m * plane + q0 : NULL, q1 - q0, ep);
}

/* One block of tiles [t0, t0 + n) through phases 1-3 by the calling thread alone. */
static void w4_block_serial(const ember_conv_geom *g, const w4_plan *p, long M, const float *u, const float *bias,
                            const float *xp, float *V, float *O, float *yc, long t0, long n)
{
    for (long tl = 0; tl < n; tl++) w4_transform_in(p, xp, t0 + tl, tl, V);
    for (long xi = 0; xi < p->gemms; xi++) w4_gemm(p, M, u, V, O, n, xi);
    for (long tl = 0; tl < n; tl++) w4_transform_out(g, p, M, O, bias, t0 + tl, tl, yc);
}

void ember_winograd4(const ember_conv_geom *g, long M, const float *u, const float *bias, const float *residual,
                     float *y, const ember_epilogue *ep, float *scratch, int nthreads)
{
    w4_plan p = w4_plan_of(g, M, nthreads);
    long team_floats = 36 * p.TB * (p.Cp + p.Mp);
    float *xp = scratch, *V = xp + p.Hp * p.Wp * p.Cp, *yc = V + p.teams * team_floats;
    long plane = g->OH * g->OW, bands = (M + 15) / 16;
    w4_pad_input(g, &p, xp, nthreads);
    if (p.split) {
        /* Each thread its own run of tiles (the rows of xp its pad pass wrote, mostly), in its
         * own V and O: nothing but U and the edges cross between cores. */
        #pragma omp parallel for num_threads(nthreads) schedule(static, 1)
        for (long team = 0; team < nthreads; team++) {
            float *Vt = V + team * team_floats, *Ot = Vt + 36 * p.TB * p.Cp;
            long t1 = p.T * (team + 1) / nthreads;
            for (long t0 = p.T * team / nthreads; t0 < t1; t0 += p.TB)
                w4_block_serial(g, &p, M, u, bias, xp, Vt, Ot, yc, t0, t1 - t0 < p.TB ? t1 - t0 : p.TB);
        }
        /* Phase 4 by runs of output pixels, which the same thread's tiles mostly produced. */
        #pragma omp parallel for num_threads(nthreads) schedule(static, 1)
        for (long team = 0; team < nthreads; team++) {
            long q0 = plane * team / nthreads, q1 = plane * (team + 1) / nthreads;
            for (long band = 0; band < bands; band++) w4_store(g, &p, M, yc, residual, y, ep, q0, q1, band * 16);
        }
        return;
    }
    float *O = V + 36 * p.TB * p.Cp;
    for (long t0 = 0; t0 < p.T; t0 += p.TB) {
        long n = p.T - t0 < p.TB ? p.T - t0 : p.TB;
        #pragma omp parallel for num_threads(nthreads) schedule(static) if(nthreads > 1)
        for (long tl = 0; tl < n; tl++) w4_transform_in(&p, xp, t0 + tl, tl, V);
        /* Dynamic (a thread the machine preempts holds one GEMM up, not half of them); the
         * bound in a variable, so GCC calls the split loop entry points Ember's pool defines. */
        #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) if(nthreads > 1)
        for (long xi = 0; xi < p.gemms; xi++) w4_gemm(&p, M, u, V, O, n, xi);
        #pragma omp parallel for num_threads(nthreads) schedule(static) if(nthreads > 1)
        for (long tl = 0; tl < n; tl++)
            w4_transform_out(g, &p, M, O, bias, t0 + tl, tl, yc);
    }
    /* Phase 4 in bands of 16 channels per thread. */
    #pragma omp parallel for num_threads(nthreads) schedule(static) if(nthreads > 1)
    for (long band = 0; band < bands; band++) w4_store(g, &p, M, yc, residual, y, ep, 0, plane, band * 16);
}
