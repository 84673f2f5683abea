/* Convolution pieces of the kernel library: im2col panels and direct convolution through
 * phase planes (depthwise convolution lives in ember_depthwise.c, shallow convolution in
 * ember_conv_shallow.c). See ember_gemm.h. */
#define EMBER_SIMD_BUILTINS 1 /* ember_simd.h: no <immintrin.h> needed (compile time) */
#include "ember_gemm.h"
#include "ember_math.h"
#include "ember_simd.h"

/* Columns of a panel that share one output row form a segment: within it, input columns
 * advance by the stride, so stride-1 segments copy with memcpy plus zero edges. */
void ember_pack_im2col(float *panel, const void *ctx, long col0)
{
    const ember_conv_geom *g = (const ember_conv_geom *)ctx;
    long n = g->OH * g->OW;
    int ncols = n - col0 < EMBER_NR ? (int)(n - col0) : EMBER_NR;
    int seg_start[EMBER_NR + 1], seg_oh[EMBER_NR], seg_ow[EMBER_NR], segments = 0;
    for (int j = 0; j < ncols;) {
        long q = col0 + j, oh = q / g->OW, ow = q % g->OW;
        int len = (int)(g->OW - ow);
        if (len > ncols - j) len = ncols - j;
        seg_start[segments] = j; seg_oh[segments] = (int)oh; seg_ow[segments] = (int)ow;
        segments++;
        j += len;
    }
    seg_start[segments] = ncols;
    for (long c = 0; c < g->C; c++) {
        const float *xc = g->x + c * g->H * g->W;
        for (long u = 0; u < g->KH; u++)
            for (long v = 0; v < g->KW; v++) {
                float *dst = panel + ((c * g->KH + u) * g->KW + v) * EMBER_NR;
                for (int s = 0; s < segments; s++) {
                    int j0 = seg_start[s], len = seg_start[s + 1] - j0;
                    long ih = seg_oh[s] * g->SH - g->PH + u * g->DH;
                    if (ih < 0 || ih >= g->H) { memset(dst + j0, 0, (size_t)len * sizeof(float)); continue; }
                    const float *row = xc + ih * g->W;
                    long iw0 = seg_ow[s] * g->SW - g->PW + v * g->DW;
                    if (g->SW == 1) {
                        long lo = iw0 < 0 ? -iw0 : 0, hi = g->W - iw0 < len ? g->W - iw0 : len;
                        if (lo > len) lo = len;  /* a segment wholly inside the padding */
                        if (hi < lo) hi = lo;
                        memset(dst + j0, 0, (size_t)lo * sizeof(float));
                        memcpy(dst + j0 + lo, row + iw0 + lo, (size_t)(hi - lo) * sizeof(float));
                        memset(dst + j0 + hi, 0, (size_t)(len - hi) * sizeof(float));
                    } else {
                        for (int t = 0; t < len; t++) {
                            long iw = iw0 + t * g->SW;
                            dst[j0 + t] = (iw >= 0 && iw < g->W) ? row[iw] : 0.0f;
                        }
                    }
                }
                for (int j = ncols; j < EMBER_NR; j++) dst[j] = 0.0f;
            }
    }
}

/* The 3-D im2col: as above, a segment being the columns that share one output row (od, oh). */
void ember_pack_im2col3d(float *panel, const void *ctx, long col0)
{
    const ember_conv3d_geom *g = (const ember_conv3d_geom *)ctx;
    long plane = g->OH * g->OW, n = g->OD * plane;
    int ncols = n - col0 < EMBER_NR ? (int)(n - col0) : EMBER_NR;
    int seg_start[EMBER_NR + 1], segments = 0;
    long seg_od[EMBER_NR], seg_oh[EMBER_NR], seg_ow[EMBER_NR];
    for (int j = 0; j < ncols;) {
        long q = col0 + j, r = q % plane, ow = r % g->OW;
        int len = (int)(g->OW - ow);
        if (len > ncols - j) len = ncols - j;
        seg_start[segments] = j; seg_od[segments] = q / plane; seg_oh[segments] = r / g->OW; seg_ow[segments] = ow;
        segments++;
        j += len;
    }
    seg_start[segments] = ncols;
    long taps = g->KD * g->KH * g->KW;
    for (long c = 0; c < g->C; c++) {
        const float *xc = g->x + c * g->D * g->H * g->W;
        for (long a = 0; a < g->KD; a++)
            for (long u = 0; u < g->KH; u++)
                for (long v = 0; v < g->KW; v++) {
                    float *dst = panel + (c * taps + (a * g->KH + u) * g->KW + v) * EMBER_NR;
                    for (int s = 0; s < segments; s++) {
                        int j0 = seg_start[s], len = seg_start[s + 1] - j0;
                        long id = seg_od[s] * g->SD - g->PD + a * g->DD, ih = seg_oh[s] * g->SH - g->PH + u * g->DH;
                        if (id < 0 || id >= g->D || ih < 0 || ih >= g->H) {
                            memset(dst + j0, 0, (size_t)len * sizeof(float));
                            continue;
                        }
                        const float *row = xc + (id * g->H + ih) * g->W;
                        long iw0 = seg_ow[s] * g->SW - g->PW + v * g->DW;
                        if (g->SW == 1) {
                            long lo = iw0 < 0 ? -iw0 : 0, hi = g->W - iw0 < len ? g->W - iw0 : len;
                            if (lo > len) lo = len;
                            if (hi < lo) hi = lo;
                            memset(dst + j0, 0, (size_t)lo * sizeof(float));
                            memcpy(dst + j0 + lo, row + iw0 + lo, (size_t)(hi - lo) * sizeof(float));
                            memset(dst + j0 + hi, 0, (size_t)(len - hi) * sizeof(float));
                        } else {
                            for (int t = 0; t < len; t++) {
                                long iw = iw0 + t * g->SW;
                                dst[j0 + t] = (iw >= 0 && iw < g->W) ? row[iw] : 0.0f;
                            }
                        }
                    }
                    for (int j = ncols; j < EMBER_NR; j++) dst[j] = 0.0f;
                }
    }
}

/* Direct convolution without im2col: the zero-padded input is split into S x S phase planes
 * (as in ember_depthwise.c), so tap (c, u, v) of the output at grid position q = oh * wph + ow reads
 * phase plane ((u % S, v % S), c) at q + (u / S) * wph + v / S. With koff[k] holding that
 * offset per reduction index k, B(k, q) = phases[koff[k] + q]: the GEMM reads its B rows in
 * place and nothing is packed. The grid is wph wide (a few columns wider than OW); the
 * tiles drop the extra columns as they store into y (ember_epilogue.grid_w). */
typedef struct { long S, hph, wph, plane, grid; } conv_layout;

static conv_layout conv_plan(const ember_conv_geom *g)
{
    conv_layout l;
    l.S = g->SH;
    l.hph = g->OH + (g->KH - 1) / l.S + 2;
    l.wph = g->OW + (g->KW - 1) / l.S;
    l.plane = l.hph * l.wph;
    l.grid = g->OH * l.wph;
    return l;
}

long ember_conv_direct_scratch_bytes(const ember_conv_geom *g, long M)
{
    conv_layout l = conv_plan(g);
    (void)M;
    return (l.S * l.S * g->C * l.plane + 2 * EMBER_NR) * (long)sizeof(float);
}

void ember_conv_direct_offsets(const ember_conv_geom *g, int32_t *koff)
{
    conv_layout l = conv_plan(g);
    for (long c = 0; c < g->C; c++)
        for (long u = 0; u < g->KH; u++)
            for (long v = 0; v < g->KW; v++)
                koff[(c * g->KH + u) * g->KW + v] = (int32_t)((((u % l.S) * l.S + v % l.S) * g->C + c) * l.plane
                                                            + (u / l.S) * l.wph + v / l.S);
}

/* Whether some tap reads phase plane pl (phase (a, b), channel c): none reads a phase past
 * the kernel (a 1x1 stride-2 convolution reads one phase of four). */
static int plane_read(const ember_conv_geom *g, long S, long pl)
{
    long phase = pl / g->C;
    return phase / S < g->KH && phase % S < g->KW;
}

/* Rows [r0, r1) of phase plane pl = (phase (a, b), channel c) of the zero-padded input. */
static void fill_phase_rows(const ember_conv_geom *g, const conv_layout *l, long pl, long r0, long r1, float *dst)
{
    long S = l->S, phase = pl / g->C, c = pl % g->C, a = phase / S, b = phase % S;
    const float *xc = g->x + c * g->H * g->W;
    /* Phase column t holds input column t * S + b - PW: in range for t in [t0, t1). */
    long t0 = g->PW - b > 0 ? (g->PW - b + S - 1) / S : 0;
    long t1 = (g->W - 1 + g->PW - b) / S + 1;
    if (g->W - 1 + g->PW - b < 0) t1 = 0;
    if (t1 > l->wph) t1 = l->wph;
    if (t0 > t1) t0 = t1;
    for (long r = r0; r < r1; r++) {
        float *row = dst + r * l->wph;
        long ih = r * S + a - g->PH;
        if (ih < 0 || ih >= g->H) { memset(row, 0, (size_t)l->wph * sizeof(float)); continue; }
        const float *src = xc + ih * g->W + b - g->PW;
        for (long t = 0; t < t0; t++) row[t] = 0.0f;
        if (S == 1) memcpy(row + t0, src + t0, (size_t)(t1 - t0) * sizeof(float));
        else if (S == 2) for (long t = t0; t < t1; t++) row[t] = src[2 * t];
        else for (long t = t0; t < t1; t++) row[t] = src[t * S];
        for (long t = t1; t < l->wph; t++) row[t] = 0.0f;
    }
}

void ember_conv_direct(const ember_conv_geom *g, long M, const float *a, const int32_t *koff, const float *bias,
                       const float *residual, float *y, const ember_epilogue *ep, float *scratch, int nthreads)
{
    conv_layout l = conv_plan(g);
    long S = l.S, planes = S * S * g->C;
    float *phases = scratch;
    memset(phases + planes * l.plane, 0, 2 * EMBER_NR * sizeof(float));
    /* Planes no tap reads stay unfilled but for their start, which the last panel of the plane
     * before runs into (up to EMBER_NR - 1 columns the tiles drop): zeroed, so they are defined. */
    long spill = l.plane < 2 * EMBER_NR ? l.plane : 2 * EMBER_NR;
    for (long pl = 0; pl < planes; pl++)
        if (!plane_read(g, S, pl)) memset(phases + pl * l.plane, 0, (size_t)spill * sizeof(float));
    /* Thread t fills a contiguous run of rows of every plane read, the same every call: about
     * the grid rows its run of the GEMM's pixel panels reads (ember_gemm), so they are in its
     * own core's cache. */
    #pragma omp parallel for num_threads(nthreads) schedule(static) if(nthreads > 1)
    for (long part = 0; part < nthreads; part++)
        for (long pl = 0; pl < planes; pl++)
            if (plane_read(g, S, pl))
                fill_phase_rows(g, &l, pl, l.hph * part / nthreads, l.hph * (part + 1) / nthreads,
                                phases + pl * l.plane);
    /* The tiles store straight into y's rows (bias, residual and activation applied),
     * dropping the grid's extra columns. */
    ember_epilogue onto_y = *ep;
    onto_y.bias = bias;
    onto_y.bias_per_row = 1;
    onto_y.residual = residual;
    onto_y.ld_residual = g->OH * g->OW;
    onto_y.grid_w = l.wph;
    onto_y.out_w = g->OW;
    long K = g->C * g->KH * g->KW;
    ember_gemm(M, l.grid, K, a, K, 1, EMBER_MR * K, NULL, NULL, NULL, phases, 0, koff, y, g->OH * g->OW,
               &onto_y, NULL, nthreads);
}

/* conv_taps: the padded channel-last map holds the rows and columns the taps read, (OH - 1) * SH
 * + KH by (OW - 1) * SW + KW pixels from (-PH, -PW) on, each pixel C floats; the tap offsets
 * (K int32) follow it. */
static long taps_height(const ember_conv_geom *g) { return (g->OH - 1) * g->SH + g->KH; }
static long taps_width(const ember_conv_geom *g) { return (g->OW - 1) * g->SW + g->KW; }

long ember_conv_taps_scratch_bytes(const ember_conv_geom *g)
{
    long map = taps_height(g) * taps_width(g) * g->C;
    return map * (long)sizeof(float) + g->C * g->KH * g->KW * (long)sizeof(int32_t);
}

/* Padded rows [r0, r1) of the channel-last map: zeros where the row or column is padding, else
 * the input's row transposed (C x W onto W x C). */
static void fill_taps_rows(const ember_conv_geom *g, float *map, long r0, long r1)
{
    long wp = taps_width(g), C = g->C;
    long cols = g->W < wp - g->PW ? g->W : wp - g->PW;  /* input columns the taps read */
    for (long r = r0; r < r1; r++) {
        float *row = map + r * wp * C;
        long h = r - g->PH;
        if (h < 0 || h >= g->H || cols <= 0) {
            memset(row, 0, (size_t)(wp * C) * sizeof(float));
            continue;
        }
        memset(row, 0, (size_t)(g->PW * C) * sizeof(float));
        ember_transpose_f32(g->x + h * g->W, C, cols, g->H * g->W, row + g->PW * C, C);
        memset(row + (g->PW + cols) * C, 0, (size_t)((wp - g->PW - cols) * C) * sizeof(float));
    }
}

void ember_conv_taps(const ember_conv_geom *g, long M, const float *w_panels, const float *bias,
                     const float *residual, float *y, const ember_epilogue *ep, float *scratch, int nthreads)
{
    long hp = taps_height(g), wp = taps_width(g), C = g->C, K = C * g->KH * g->KW, P = g->OH * g->OW;
    float *map = scratch;
    int32_t *aoff = (int32_t *)(map + hp * wp * C);
    for (long u = 0; u < g->KH; u++)
        for (long v = 0; v < g->KW; v++)
            for (long c = 0; c < C; c++) aoff[(u * g->KW + v) * C + c] = (int32_t)((u * wp + v) * C + c);
    /* Thread t fills about the padded rows its band of output rows reads first. */
    #pragma omp parallel for num_threads(nthreads) schedule(static) if(nthreads > 1)
    for (long part = 0; part < nthreads; part++) fill_taps_rows(g, map, hp * part / nthreads, hp * (part + 1) / nthreads);
    /* Per output row: its OW pixels are the rows of a GEMM against every panel of W^T, each
     * 8-pixel block read through the tap offsets SW * C floats apart, y stored transposed (NCHW)
     * with bias (per column), residual and activation. Threads own contiguous bands of rows. */
    #pragma omp parallel for num_threads(nthreads) schedule(static) if(nthreads > 1)
    for (long part = 0; part < nthreads; part++) {
        ember_epilogue row_ep = *ep;
        row_ep.bias = bias;
        row_ep.bias_per_row = 0;
        row_ep.transposed = 1;
        row_ep.ld_residual = P;
        /* A chunk of W^T's panels at a time (as ember_gemm sweeps them) against every row of the
         * band: weights past the L2 then come from memory once a call, not once a row. */
        long panels = (M + EMBER_NR - 1) / EMBER_NR, chunk = ember_gemm_chunk_panels(K, panels);
        for (long p0 = 0; p0 < panels; p0 += chunk)
            for (long oh = g->OH * part / nthreads; oh < g->OH * (part + 1) / nthreads; oh++) {
                row_ep.residual = residual ? residual + oh * g->OW : NULL;
                ember_gemm_taps(g->OW, M, K, map + oh * g->SH * wp * C, g->SW * C, aoff, w_panels, p0,
                                p0 + chunk < panels ? p0 + chunk : panels, y + oh * g->OW, P, &row_ep);
            }
    }
}

/* Im2row for conv_pixel_rows (Y^T = rows x W^T, pixels as the GEMM's rows): row p = oh * OW + ow
 * of `rows` holds the input under the kernel at output pixel p, tap-major, element
 * (u * KW + v) * C + c. The input goes channel-last first (`hwc`, H * W rows of C floats, one
 * blocked transpose), so each tap of a row is one copy of C contiguous floats, or zeros where
 * the tap falls in the padding. A 1x1, stride-1, unpadded convolution's rows are the
 * channel-last input itself: the transpose writes them straight into `rows`. */
static int conv_rows_trivial(const ember_conv_geom *g)
{
    return g->KH == 1 && g->KW == 1 && g->SH == 1 && g->SW == 1 && g->PH == 0 && g->PW == 0 && g->OH == g->H
           && g->OW == g->W;
}

long ember_conv_rows_scratch_floats(const ember_conv_geom *g)
{
    return conv_rows_trivial(g) ? 0 : g->H * g->W * g->C;
}

void ember_conv_rows(const ember_conv_geom *g, float *hwc, float *rows, int nthreads)
{
    long C = g->C, hw = g->H * g->W;
    if (conv_rows_trivial(g)) {
        ember_transpose_f32_threads(g->x, C, hw, hw, rows, C, nthreads);
        return;
    }
    ember_transpose_f32_threads(g->x, C, hw, hw, hwc, C, nthreads);
    long P = g->OH * g->OW, K = g->KH * g->KW * C;
    size_t span = (size_t)C * sizeof(float);
    #pragma omp parallel for num_threads(nthreads) schedule(static) if(nthreads > 1)
    for (long p = 0; p < P; p++) {
        long oh = p / g->OW, ow = p % g->OW;
        float *row = rows + p * K;
        for (long u = 0; u < g->KH; u++) {
            long ih = oh * g->SH - g->PH + u * g->DH;
            for (long v = 0; v < g->KW; v++) {
                long iw = ow * g->SW - g->PW + v * g->DW;
                float *dst = row + (u * g->KW + v) * C;
                if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) memset(dst, 0, span);
                else memcpy(dst, hwc + (ih * g->W + iw) * C, span);
            }
        }
    }
}
