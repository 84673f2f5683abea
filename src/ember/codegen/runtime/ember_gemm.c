/* Definitions for ember_gemm.h (see there). */
#include "ember_gemm.h"
#include <omp.h>

typedef float ember_v16 __attribute__((vector_size(64)));
typedef int32_t ember_i16 __attribute__((vector_size(64)));

static inline ember_v16 vload(const float *p) { ember_v16 v; memcpy(&v, p, sizeof v); return v; }
static inline void vstore(float *p, ember_v16 v) { memcpy(p, &v, sizeof v); }
static inline ember_v16 vsplat(float x) { ember_v16 v = {0}; return v + x; }
static inline ember_v16 vselect(ember_i16 mask, ember_v16 a, ember_v16 b) {
    return (ember_v16)(((ember_i16)a & mask) | ((ember_i16)b & ~mask));
}

float ember_activate(float v, const ember_epilogue *ep)
{
    switch (ep->act) {
    case EMBER_ACT_RELU: return v > 0.0f ? v : 0.0f;
    case EMBER_ACT_CLIP: return v < ep->alpha ? ep->alpha : (v > ep->beta ? ep->beta : v);
    case EMBER_ACT_LEAKY_RELU: return v >= 0.0f ? v : v * ep->alpha;
    case EMBER_ACT_SIGMOID: return 1.0f / (1.0f + expf(-v));
    case EMBER_ACT_TANH: return tanhf(v);
    case EMBER_ACT_HARD_SIGMOID: { float h = v * ep->alpha + ep->beta; return h < 0.0f ? 0.0f : (h > 1.0f ? 1.0f : h); }
    default: return v;
    }
}

/* Bias, residual and activation over a finished tile of full 32-column rows. */
static void epilogue_full(float *c, long ldc, int mr, const ember_epilogue *ep, long row0, long col0)
{
    for (int i = 0; i < mr; i++) {
        float *row = c + i * ldc;
        for (int h = 0; h < 2; h++) {
            ember_v16 v = vload(row + 16 * h);
            if (ep->bias) v += ep->bias_per_row ? vsplat(ep->bias[row0 + i]) : vload(ep->bias + col0 + 16 * h);
            if (ep->residual) v += vload(ep->residual + (row0 + i) * ep->ld_residual + col0 + 16 * h);
            switch (ep->act) {
            case EMBER_ACT_NONE: break;
            case EMBER_ACT_RELU: v = vselect(v > vsplat(0.0f), v, vsplat(0.0f)); break;
            case EMBER_ACT_CLIP:
                v = vselect(v < vsplat(ep->alpha), vsplat(ep->alpha), v);
                v = vselect(v > vsplat(ep->beta), vsplat(ep->beta), v);
                break;
            case EMBER_ACT_LEAKY_RELU: v = vselect(v >= vsplat(0.0f), v, v * ep->alpha); break;
            default: {
                float tmp[16];
                vstore(tmp, v);
                for (int j = 0; j < 16; j++) tmp[j] = ember_activate(tmp[j], ep);
                v = vload(tmp);
            }
            }
            vstore(row + 16 * h, v);
        }
    }
}

static void epilogue_partial(float *c, long ldc, int mr, int ncols, const ember_epilogue *ep, long row0, long col0)
{
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < ncols; j++) {
            float v = c[i * ldc + j];
            if (ep->bias) v += ep->bias_per_row ? ep->bias[row0 + i] : ep->bias[col0 + j];
            if (ep->residual) v += ep->residual[(row0 + i) * ep->ld_residual + col0 + j];
            c[i * ldc + j] = ember_activate(v, ep);
        }
}

/* One mr x 32 tile over the full K; `mr` is a constant in each instantiation below. */
static inline __attribute__((always_inline)) void tile(
    int mr, long kc, const float *a, long a_rs, long a_ks, const float *bp, long b_ks, float *c, long ldc, int ncols)
{
    ember_v16 acc[EMBER_MR][2];
    for (int i = 0; i < EMBER_MR; i++) { acc[i][0] = vsplat(0.0f); acc[i][1] = vsplat(0.0f); }
    for (long k = 0; k < kc; k++) {
        ember_v16 b0 = vload(bp + k * b_ks);
        ember_v16 b1 = vload(bp + k * b_ks + 16);
        #pragma GCC unroll 8
        for (int i = 0; i < EMBER_MR; i++) {
            if (i < mr) {
                float ai = a[i * a_rs + k * a_ks];
                acc[i][0] += ai * b0;
                acc[i][1] += ai * b1;
            }
        }
    }
    if (ncols == EMBER_NR) {
        #pragma GCC unroll 8
        for (int i = 0; i < EMBER_MR; i++) {
            if (i < mr) { vstore(c + i * ldc, acc[i][0]); vstore(c + i * ldc + 16, acc[i][1]); }
        }
        return;
    }
    for (int i = 0; i < mr; i++) {
        float tmp[EMBER_NR];
        vstore(tmp, acc[i][0]);
        vstore(tmp + 16, acc[i][1]);
        memcpy(c + i * ldc, tmp, (size_t)ncols * sizeof(float));
    }
}

void ember_tile_rows(int mr, long kc, const float *a, long a_rs, long a_ks, const float *bp, long b_ks,
                     float *c, long ldc, int ncols, const ember_epilogue *ep, long row0, long col0)
{
    switch (mr) {
    case 8: tile(8, kc, a, a_rs, a_ks, bp, b_ks, c, ldc, ncols); break;
    case 7: tile(7, kc, a, a_rs, a_ks, bp, b_ks, c, ldc, ncols); break;
    case 6: tile(6, kc, a, a_rs, a_ks, bp, b_ks, c, ldc, ncols); break;
    case 5: tile(5, kc, a, a_rs, a_ks, bp, b_ks, c, ldc, ncols); break;
    case 4: tile(4, kc, a, a_rs, a_ks, bp, b_ks, c, ldc, ncols); break;
    case 3: tile(3, kc, a, a_rs, a_ks, bp, b_ks, c, ldc, ncols); break;
    case 2: tile(2, kc, a, a_rs, a_ks, bp, b_ks, c, ldc, ncols); break;
    default: tile(1, kc, a, a_rs, a_ks, bp, b_ks, c, ldc, ncols); break;
    }
    if (!ep || (!ep->bias && !ep->residual && ep->act == EMBER_ACT_NONE)) return;
    if (ncols == EMBER_NR) epilogue_full(c, ldc, mr, ep, row0, col0);
    else epilogue_partial(c, ldc, mr, ncols, ep, row0, col0);
}

void ember_pack_panel(float *panel, const float *b, long ldb, long K, long N, long col0)
{
    long ncols = N - col0 < EMBER_NR ? N - col0 : EMBER_NR;
    for (long k = 0; k < K; k++) {
        const float *src = b + k * ldb + col0;
        float *dst = panel + k * EMBER_NR;
        if (ncols == EMBER_NR) {
            memcpy(dst, src, EMBER_NR * sizeof(float));
        } else {
            for (long j = 0; j < ncols; j++) dst[j] = src[j];
            for (long j = ncols; j < EMBER_NR; j++) dst[j] = 0.0f;
        }
    }
}

void ember_pack_rowmajor(float *panel, const void *ctx, long col0)
{
    const ember_rowmajor *r = (const ember_rowmajor *)ctx;
    ember_pack_panel(panel, r->b, r->ldb, r->K, r->N, col0);
}

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

/* Panels are processed in chunks that stay in L2 while every 8-row block of A sweeps them,
 * so each A block is loaded once per chunk and each panel once per row block from L2. */
#define EMBER_CHUNK_BYTES (384L * 1024)

static long chunk_panels(long K, long panels)
{
    long chunk = EMBER_CHUNK_BYTES / (K * EMBER_NR * (long)sizeof(float));
    if (chunk < 1) chunk = 1;
    return chunk < panels ? chunk : panels;
}

long ember_gemm_scratch_bytes(long N, long K, int nthreads)
{
    long panels = (N + EMBER_NR - 1) / EMBER_NR;
    long per_thread = chunk_panels(K, panels) * K * EMBER_NR * (long)sizeof(float);
    long shared = panels * K * EMBER_NR * (long)sizeof(float);
    long threaded = per_thread * nthreads;
    return threaded > shared ? threaded : shared;
}

/* B's source for one chunk of panels: pre-packed, packed into scratch, or read in place. */
typedef struct {
    const float *panels; /* packed panels of this chunk, or NULL when reading in place */
    const float *direct; /* row-major B for in-place reads of full panels */
    long ldb;
    const float *tail;   /* packed copy of a partial last panel (in-place mode) */
} ember_bsource;

static inline void sweep(long M, long K, const float *a, long a_rs, long a_ks, long a_block,
                         const ember_bsource *b, long p0, long p1, long N, float *c, long ldc,
                         const ember_epilogue *ep, long m0, long m1)
{
    for (long r = m0; r < m1; r += EMBER_MR) {
        int mr = M - r < EMBER_MR ? (int)(M - r) : EMBER_MR;
        const float *ab = a + (r / EMBER_MR) * a_block;
        for (long p = p0; p < p1; p++) {
            long col0 = p * EMBER_NR;
            int ncols = N - col0 < EMBER_NR ? (int)(N - col0) : EMBER_NR;
            const float *bp;
            long b_ks;
            if (b->panels) { bp = b->panels + (p - p0) * K * EMBER_NR; b_ks = EMBER_NR; }
            else if (ncols == EMBER_NR) { bp = b->direct + col0; b_ks = b->ldb; }
            else { bp = b->tail; b_ks = EMBER_NR; }
            ember_tile_rows(mr, K, ab, a_rs, a_ks, bp, b_ks, c + r * ldc + col0, ldc, ncols, ep, r, col0);
        }
    }
}

void ember_gemm(long M, long N, long K, const float *a, long a_rs, long a_ks, long a_block,
                const float *bp, ember_packer pack, const void *pack_ctx, const float *b_direct, long ldb,
                float *c, long ldc, const ember_epilogue *ep, float *scratch, int nthreads)
{
    long panels = (N + EMBER_NR - 1) / EMBER_NR;
    long panel_floats = K * EMBER_NR;
    if (b_direct) {
        /* Full panels are read in place; only a partial last panel needs a packed copy. */
        ember_bsource src = { NULL, b_direct, ldb, scratch };
        if (N % EMBER_NR) ember_pack_panel(scratch, b_direct, ldb, K, N, (panels - 1) * EMBER_NR);
        long row_blocks = (M + EMBER_MR - 1) / EMBER_MR;
        long items = row_blocks * panels;
        #pragma omp parallel for num_threads(nthreads) schedule(static) if(nthreads > 1 && items > 1)
        for (long item = 0; item < items; item++) {
            long p = item % panels, rb = item / panels;
            sweep(M, K, a, a_rs, a_ks, a_block, &src, p, p + 1, N, c, ldc, ep, rb * EMBER_MR,
                  rb * EMBER_MR + EMBER_MR < M ? rb * EMBER_MR + EMBER_MR : M);
        }
        return;
    }
    long chunk = chunk_panels(K, panels);
    long chunks = (panels + chunk - 1) / chunk;
    long row_blocks = (M + EMBER_MR - 1) / EMBER_MR;
    if (chunks >= 2L * nthreads || row_blocks < 2L * nthreads || nthreads == 1) {
        /* Enough column work: threads take whole chunks (packing their own panels). */
        #pragma omp parallel for num_threads(nthreads) schedule(static) if(nthreads > 1 && chunks > 1)
        for (long ch = 0; ch < chunks; ch++) {
            long p0 = ch * chunk, p1 = p0 + chunk < panels ? p0 + chunk : panels;
            ember_bsource src = { NULL, NULL, 0, NULL };
            if (bp) {
                src.panels = bp + p0 * panel_floats;
            } else {
                float *mine = scratch + (long)omp_get_thread_num() * chunk * panel_floats;
                for (long p = p0; p < p1; p++) pack(mine + (p - p0) * panel_floats, pack_ctx, p * EMBER_NR);
                src.panels = mine;
            }
            sweep(M, K, a, a_rs, a_ks, a_block, &src, p0, p1, N, c, ldc, ep, 0, M);
        }
        return;
    }
    /* Few, tall column chunks: pack every panel once, then split the rows. */
    const float *all = bp;
    if (!bp) {
        #pragma omp parallel for num_threads(nthreads) schedule(static)
        for (long p = 0; p < panels; p++) pack(scratch + p * panel_floats, pack_ctx, p * EMBER_NR);
        all = scratch;
    }
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (long rb = 0; rb < row_blocks; rb++)
        for (long ch = 0; ch < chunks; ch++) {
            long p0 = ch * chunk, p1 = p0 + chunk < panels ? p0 + chunk : panels;
            long m0 = rb * EMBER_MR, m1 = m0 + EMBER_MR < M ? m0 + EMBER_MR : M;
            ember_bsource src = { all + p0 * panel_floats, NULL, 0, NULL };
            sweep(M, K, a, a_rs, a_ks, a_block, &src, p0, p1, N, c, ldc, ep, m0, m1);
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
    return g->SH == g->SW && g->DH == 1 && g->DW == 1 && g->SH <= 4;
}

long ember_depthwise_scratch_bytes(const ember_conv_geom *g, int nthreads)
{
    dw_layout l = dw_plan(g);
    long per_thread = l.S * l.S * l.hph * l.wph + l.ext + 64;
    return nthreads * per_thread * (long)sizeof(float);
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
    float *acc = work + S * S * phase;
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
    for (long q = 0; q < l->ext; q++) acc[q] = b0;
    for (long u = 0; u < g->KH; u++)
        for (long v = 0; v < g->KW; v++) {
            const float *src = work + ((u % S) * S + v % S) * phase + (u / S) * l->wph + v / S;
            float wv = wc[u * g->KW + v];
            for (long q = 0; q < l->ext; q++) acc[q] += wv * src[q];
        }
    for (long i = 0; i < g->OH; i++) {
        memcpy(yc + i * g->OW, acc + i * l->wph, (size_t)g->OW * sizeof(float));
        dw_epilogue_row(yc + i * g->OW, rc ? rc + i * g->OW : NULL, g->OW, ep);
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
    long per_thread = l.S * l.S * l.hph * l.wph + l.ext + 64;
    int flat = dw_flat(g);
    #pragma omp parallel for num_threads(nthreads) schedule(static) if(nthreads > 1)
    for (long c = 0; c < g->C; c++) {
        const float *xc = g->x + c * g->H * g->W;
        const float *wc = w + c * g->KH * g->KW;
        const float *rc = residual ? residual + c * plane : NULL;
        float b0 = bias ? bias[c] : 0.0f;
        if (flat) {
            float *work = scratch + (long)omp_get_thread_num() * per_thread;
            dw_channel_flat(g, &l, xc, wc, b0, y + c * plane, rc, ep, work);
        } else {
            dw_channel_general(g, xc, wc, b0, y + c * plane, rc, ep);
        }
    }
}
