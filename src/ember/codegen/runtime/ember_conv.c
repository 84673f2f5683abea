/* Convolution pieces of the kernel library: im2col panels, direct convolution through
 * phase planes, and depthwise convolution. See ember_gemm.h. */
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
                        if (hi < lo) hi = lo;
                        if (lo > len) lo = len;
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

/* Phase planes: with stride S, input pixel (r, s) of the zero-padded plane goes to phase
 * (r % S, s % S) at (r / S, s / S). Tap (u, v) of output (i, j) then reads phase
 * (u % S, v % S) at (i + u / S, j + v / S): unit stride. Flattening output rows to the phase
 * width turns each tap into one long contiguous multiply-add over the whole plane; the
 * columns past OW are computed and dropped. */
typedef struct { long S, hph, wph, ext; } dw_layout;

static dw_layout dw_plan(const ember_conv_geom *g)
{
    dw_layout l;
    l.S = g->SH;
    l.hph = g->OH + (g->KH - 1) / l.S + 1;
    l.wph = g->OW + (g->KW - 1) / l.S + 1;
    l.ext = g->OH * l.wph;
    return l;
}

static int dw_flat(const ember_conv_geom *g)
{
    return g->SH == g->SW && g->DH == 1 && g->DW == 1 && g->SH <= 4 && g->KH * g->KW <= 64;
}

static long dw_s2_width(const ember_conv_geom *g);

/* Small planes go 16 channels at a time, channel-last (see dw_block16): the padded input
 * extent and the output block, 16 floats per position. */
#define EMBER_DW_BLOCK_MAX_PIXELS 256
static long dw_block_floats(const ember_conv_geom *g)
{
    long hp = (g->OH - 1) * g->SH + (g->KH - 1) * g->DH + 1, wp = (g->OW - 1) * g->SW + (g->KW - 1) * g->DW + 1;
    return (hp * wp + g->OH * g->OW) * 16 + 64;
}

static int dw_blocked(const ember_conv_geom *g)
{
    return g->H * g->W <= EMBER_DW_BLOCK_MAX_PIXELS && g->C >= 16 && g->KH * g->KW <= 64;
}

/* Floats of scratch one thread needs: the largest of the layouts. */
static long dw_per_thread(const ember_conv_geom *g)
{
    dw_layout l = dw_plan(g);
    long flat = l.S * l.S * l.hph * l.wph + l.ext + 96;
    long strided = g->KH * dw_s2_width(g) + 64;
    long most = flat > strided ? flat : strided;
    long block = dw_block_floats(g);
    return most > block ? most : block;
}

long ember_depthwise_scratch_bytes(const ember_conv_geom *g, int nthreads)
{
    return nthreads * dw_per_thread(g) * (long)sizeof(float);
}

static void dw_epilogue_row(float *yr, const float *rr, long n, const ember_epilogue *ep)
{
    if (rr) for (long j = 0; j < n; j++) yr[j] += rr[j];
    switch (ep->act) {
    case EMBER_ACT_NONE: break;
    case EMBER_ACT_RELU: for (long j = 0; j < n; j++) yr[j] = yr[j] > 0.0f ? yr[j] : 0.0f; break;
    case EMBER_ACT_CLIP:
        for (long j = 0; j < n; j++) {
            float v = yr[j];
            v = v < ep->alpha ? ep->alpha : v;
            yr[j] = v > ep->beta ? ep->beta : v;
        }
        break;
    default: for (long j = 0; j < n; j++) yr[j] = ember_activate(yr[j], ep);
    }
}

/* Equal strides, no dilation: phase planes and flat accumulation (see dw_layout). */
static void dw_channel_flat(const ember_conv_geom *g, const dw_layout *l, const float *xc, const float *wc,
                            float b0, float *yc, const float *rc, const ember_epilogue *ep, float *work)
{
    long S = l->S, phase = l->hph * l->wph;
    float *acc = work + S * S * phase + 32;  /* 32 floats of slack for the last chunk's reads */
    memset(work, 0, (size_t)(S * S * phase) * sizeof(float));
    for (long r = 0; r < g->H; r++) {
        long pr = r + g->PH, q = pr / S;
        if (q >= l->hph) break;
        const float *row = xc + r * g->W;
        for (long b = 0; b < S; b++) {
            /* Columns s = t * S + b - PW of this input row land in phase column b at t. */
            float *dst = work + ((pr % S) * S + b) * phase + q * l->wph;
            long t0 = g->PW - b > 0 ? (g->PW - b + S - 1) / S : 0;
            long t1 = (g->W - 1 + g->PW - b) / S + 1;
            if (t1 > l->wph) t1 = l->wph;
            if (S == 1) {
                if (t1 > t0) memcpy(dst + t0, row + t0 - g->PW, (size_t)(t1 - t0) * sizeof(float));
            } else if (S == 2) {
                const float *src = row + b - g->PW;  /* a constant stride lets the loop vectorize */
                for (long t = t0; t < t1; t++) dst[t] = src[2 * t];
            } else {
                for (long t = t0; t < t1; t++) dst[t] = row[t * S + b - g->PW];
            }
        }
    }
    /* Where each tap reads in the phase planes, at grid position 0. */
    long taps = g->KH * g->KW;
    const float *tap_src[64];
    for (long u = 0; u < g->KH; u++)
        for (long v = 0; v < g->KW; v++)
            tap_src[u * g->KW + v] = work + ((u % S) * S + v % S) * phase + (u / S) * l->wph + v / S;
    /* Strips of output rows keep the accumulators and the input rows they read in L1. */
    long strip = 2048 / l->wph > 0 ? 2048 / l->wph : 1;
    for (long i0 = 0; i0 < g->OH; i0 += strip) {
        long i1 = i0 + strip < g->OH ? i0 + strip : g->OH;
        long q0 = i0 * l->wph, q1 = i1 * l->wph;
        /* 16 outputs at a time with every tap accumulated in one register. The last chunk may
         * run past q1 into unused accumulator slots and read up to 15 floats past the planes
         * (the scratch has that slack). */
        for (long q = q0; q < q1; q += 16) {
            ember_v16 sum = vsplat(b0);
            for (long t = 0; t < taps; t++) sum += wc[t] * vload(tap_src[t] + q);
            vstore(acc + q - q0, sum);
        }
        for (long i = i0; i < i1; i++) {
            const float *src = acc + (i - i0) * l->wph;
            float *dst = yc + i * g->OW;
            for (long j = 0; j < g->OW; j++) dst[j] = src[j];
        }
    }
    /* The plane is contiguous in y (and the residual): one epilogue pass over all of it. */
    dw_epilogue_row(yc, rc, g->OH * g->OW, ep);
}

/* Stride 2 without dilation: the channel is copied once into a zero-padded plane, and each
 * group of 16 outputs gathers its stride-2 inputs with one two-vector shuffle per tap,
 * instead of splitting the input into four phase planes (an extra pass over memory). */
static inline ember_v16 even_lanes(const float *p)
{
    ember_v16 lo = vload(p), hi = vload(p + 16);
#ifdef __clang__
    return __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
#else
    const ember_i16 even = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    return __builtin_shuffle(lo, hi, even);
#endif
}

static long dw_s2_width(const ember_conv_geom *g)
{
    /* Room for the last group of 16 outputs: 2 * 16 + KW columns past its start. */
    long groups = (g->OW + 15) / 16;
    long need = groups * 32 + g->KW + 32;
    long padded = g->W + 2 * g->PW;
    return need > padded ? need : padded;
}

static int dw_s2(const ember_conv_geom *g)
{
    return g->SH == 2 && g->SW == 2 && g->DH == 1 && g->DW == 1 && g->KH * g->KW <= 64;
}

static void dw_channel_s2(const ember_conv_geom *g, const float *xc, const float *wc, float b0, float *yc,
                          const float *rc, const ember_epilogue *ep, float *work)
{
    long wp = dw_s2_width(g);
    for (long i = 0; i < g->OH; i++) {
        /* The KH padded input rows this output row reads, rebuilt per row: they stay in L1. */
        for (long u = 0; u < g->KH; u++) {
            float *row = work + u * wp;
            long ih = 2 * i + u - g->PH;
            if (ih < 0 || ih >= g->H) { memset(row, 0, (size_t)wp * sizeof(float)); continue; }
            memset(row, 0, (size_t)g->PW * sizeof(float));
            memcpy(row + g->PW, xc + ih * g->W, (size_t)g->W * sizeof(float));
            memset(row + g->PW + g->W, 0, (size_t)(wp - g->PW - g->W) * sizeof(float));
        }
        float *yr = yc + i * g->OW;
        for (long j = 0; j < g->OW; j += 16) {
            ember_v16 sum = vsplat(b0);
            for (long u = 0; u < g->KH; u++) {
                const float *row = work + u * wp + 2 * j;
                for (long v = 0; v < g->KW; v++) sum += wc[u * g->KW + v] * even_lanes(row + v);
            }
            if (j + 16 <= g->OW) {
                vstore(yr + j, sum);
            } else {
                float tmp[16];
                vstore(tmp, sum);
                memcpy(yr + j, tmp, (size_t)(g->OW - j) * sizeof(float));
            }
        }
    }
    dw_epilogue_row(yc, rc, g->OH * g->OW, ep);
}

/* 16 channels at once for small planes, where per-channel set-up would dominate: the
 * block's input is transposed channel-last into a zero-padded buffer, every output
 * position then accumulates 16 channels in one vector per tap, and the result is transposed
 * back with the bias, residual and activation applied. */
static void dw_block16(const ember_conv_geom *g, long c0, const float *w, const float *bias, const float *residual,
                       float *y, const ember_epilogue *ep, float *work)
{
    long hp = (g->OH - 1) * g->SH + (g->KH - 1) * g->DH + 1, wp = (g->OW - 1) * g->SW + (g->KW - 1) * g->DW + 1;
    long plane = g->OH * g->OW, in_plane = g->H * g->W, taps = g->KH * g->KW;
    float *xb = work, *ob = work + hp * wp * 16;
    for (long r = 0; r < hp; r++) {
        long ih = r - g->PH;
        for (long q = 0; q < wp; q++) {
            long iw = q - g->PW;
            float *dst = xb + (r * wp + q) * 16;
            if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) {
                vstore(dst, vsplat(0.0f));
                continue;
            }
            const float *src = g->x + c0 * in_plane + ih * g->W + iw;
            for (int l = 0; l < 16; l++) dst[l] = src[l * in_plane];
        }
    }
    ember_v16 wt[64];
    for (long t = 0; t < taps; t++) {
        float tmp[16];
        for (int l = 0; l < 16; l++) tmp[l] = w[(c0 + l) * taps + t];
        wt[t] = vload(tmp);
    }
    ember_v16 b0 = vsplat(0.0f);
    if (bias) b0 = vload(bias + c0);
    for (long i = 0; i < g->OH; i++)
        for (long j = 0; j < g->OW; j++) {
            ember_v16 sum = b0;
            for (long u = 0; u < g->KH; u++) {
                const float *row = xb + ((i * g->SH + u * g->DH) * wp + j * g->SW) * 16;
                for (long v = 0; v < g->KW; v++) sum += wt[u * g->KW + v] * vload(row + v * g->DW * 16);
            }
            vstore(ob + (i * g->OW + j) * 16, sum);
        }
    for (int l = 0; l < 16; l++) {
        float *yc = y + (c0 + l) * plane;
        for (long o = 0; o < plane; o++) yc[o] = ob[o * 16 + l];
        dw_epilogue_row(yc, residual ? residual + (c0 + l) * plane : NULL, plane, ep);
    }
}

/* Any strides and dilations: direct, with bounds checks per tap. */
static void dw_channel_general(const ember_conv_geom *g, const float *xc, const float *wc, float b0, float *yc,
                               const float *rc, const ember_epilogue *ep)
{
    for (long i = 0; i < g->OH; i++) {
        float *yr = yc + i * g->OW;
        for (long j = 0; j < g->OW; j++) {
            float acc = b0;
            for (long u = 0; u < g->KH; u++) {
                long ih = i * g->SH - g->PH + u * g->DH;
                if (ih < 0 || ih >= g->H) continue;
                for (long v = 0; v < g->KW; v++) {
                    long iw = j * g->SW - g->PW + v * g->DW;
                    if (iw >= 0 && iw < g->W) acc += wc[u * g->KW + v] * xc[ih * g->W + iw];
                }
            }
            yr[j] = acc;
        }
        dw_epilogue_row(yr, rc ? rc + i * g->OW : NULL, g->OW, ep);
    }
}

void ember_depthwise(const ember_conv_geom *g, const float *w, const float *bias, const float *residual,
                     float *y, const ember_epilogue *ep, float *scratch, int nthreads)
{
    long plane = g->OH * g->OW;
    dw_layout l = dw_plan(g);
    long per_thread = dw_per_thread(g);
    int flat = dw_flat(g), s2 = dw_s2(g);
    /* Small planes: whole blocks of 16 channels first; leftover channels go one by one. */
    long blocks = dw_blocked(g) ? g->C / 16 : 0;
    #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) if(nthreads > 1 && blocks > 1)
    for (long blk = 0; blk < blocks; blk++)
        dw_block16(g, blk * 16, w, bias, residual, y, ep, scratch + (long)ember_thread_num() * per_thread);
    long rest = g->C - blocks * 16;
    #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 4) if(nthreads > 1 && rest > 1)
    for (long c = blocks * 16; c < g->C; c++) {
        const float *xc = g->x + c * g->H * g->W;
        const float *wc = w + c * g->KH * g->KW;
        const float *rc = residual ? residual + c * plane : NULL;
        float b0 = bias ? bias[c] : 0.0f;
        if (s2) {
            float *work = scratch + (long)ember_thread_num() * per_thread;
            dw_channel_s2(g, xc, wc, b0, y + c * plane, rc, ep, work);
        } else if (flat) {
            float *work = scratch + (long)ember_thread_num() * per_thread;
            dw_channel_flat(g, &l, xc, wc, b0, y + c * plane, rc, ep, work);
        } else {
            dw_channel_general(g, xc, wc, b0, y + c * plane, rc, ep);
        }
    }
}

/* Direct convolution without im2col: the zero-padded input is split into S x S phase planes
 * (see dw_layout), so tap (c, u, v) of the output at grid position q = oh * wph + ow reads
 * phase plane ((u % S, v % S), c) at q + (u / S) * wph + v / S. With koff[k] holding that
 * offset per reduction index k, B(k, q) = phases[koff[k] + q]: the GEMM reads its B rows in
 * place and nothing is packed. The grid is wph wide (a few columns wider than OW); the
 * extra columns are computed into scratch and dropped when the epilogue writes y. */
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

int ember_conv_direct_ok(const ember_conv_geom *g)
{
    return g->SH == g->SW && g->DH == 1 && g->DW == 1;
}

long ember_conv_direct_scratch_bytes(const ember_conv_geom *g, long M)
{
    conv_layout l = conv_plan(g);
    return (l.S * l.S * g->C * l.plane + 2 * EMBER_NR + M * l.grid) * (long)sizeof(float);
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

void ember_conv_direct(const ember_conv_geom *g, long M, const float *a, const int32_t *koff, const float *bias,
                       const float *residual, float *y, const ember_epilogue *ep, float *scratch, int nthreads)
{
    conv_layout l = conv_plan(g);
    long S = l.S, planes = S * S * g->C;
    float *phases = scratch;
    float *grid = scratch + planes * l.plane + 2 * EMBER_NR;
    memset(phases + planes * l.plane, 0, 2 * EMBER_NR * sizeof(float));
    #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 4) if(nthreads > 1)
    for (long pl = 0; pl < planes; pl++) {
        long phase = pl / g->C, c = pl % g->C, a_ = phase / S, b_ = phase % S;
        float *dst = phases + pl * l.plane;
        const float *xc = g->x + c * g->H * g->W;
        /* Phase column t holds input column t * S + b - PW: in range for t in [t0, t1). */
        long t0 = g->PW - b_ > 0 ? (g->PW - b_ + S - 1) / S : 0;
        long t1 = (g->W - 1 + g->PW - b_) / S + 1;
        if (g->W - 1 + g->PW - b_ < 0) t1 = 0;
        if (t1 > l.wph) t1 = l.wph;
        if (t0 > t1) t0 = t1;
        for (long r = 0; r < l.hph; r++) {
            float *row = dst + r * l.wph;
            long ih = r * S + a_ - g->PH;
            if (ih < 0 || ih >= g->H) { memset(row, 0, (size_t)l.wph * sizeof(float)); continue; }
            const float *src = xc + ih * g->W + b_ - g->PW;
            for (long t = 0; t < t0; t++) row[t] = 0.0f;
            if (S == 1) memcpy(row + t0, src + t0, (size_t)(t1 - t0) * sizeof(float));
            else if (S == 2) for (long t = t0; t < t1; t++) row[t] = src[2 * t];
            else for (long t = t0; t < t1; t++) row[t] = src[t * S];
            for (long t = t1; t < l.wph; t++) row[t] = 0.0f;
        }
    }
    long K = g->C * g->KH * g->KW;
    ember_gemm(M, l.grid, K, a, K, 1, EMBER_MR * K, NULL, NULL, NULL, phases, 0, koff, grid, l.grid,
               NULL, NULL, nthreads);
    long pixels = g->OH * g->OW;
    #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 8) if(nthreads > 1)
    for (long m = 0; m < M; m++) {
        float b0 = bias ? bias[m] : 0.0f;
        for (long i = 0; i < g->OH; i++) {
            const float *src = grid + m * l.grid + i * l.wph;
            float *dst = y + m * pixels + i * g->OW;
            const float *res = residual ? residual + m * pixels + i * g->OW : NULL;
            for (long j = 0; j < g->OW; j++) dst[j] = src[j] + b0;
            if (res) for (long j = 0; j < g->OW; j++) dst[j] += res[j];
            switch (ep->act) {
            case EMBER_ACT_NONE: break;
            case EMBER_ACT_RELU: for (long j = 0; j < g->OW; j++) dst[j] = dst[j] > 0.0f ? dst[j] : 0.0f; break;
            case EMBER_ACT_CLIP:
                for (long j = 0; j < g->OW; j++) {
                    float v = dst[j];
                    v = v < ep->alpha ? ep->alpha : v;
                    dst[j] = v > ep->beta ? ep->beta : v;
                }
                break;
            default: for (long j = 0; j < g->OW; j++) dst[j] = ember_activate(dst[j], ep);
            }
        }
    }
}
