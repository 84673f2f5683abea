/* Definitions for ember_gemm.h (see there). */
#include "ember_gemm.h"

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
    int mr, long kc, const float *a, long a_rs, long a_ks, const float *bp, float *c, long ldc, int ncols)
{
    ember_v16 acc[EMBER_MR][2];
    for (int i = 0; i < EMBER_MR; i++) { acc[i][0] = vsplat(0.0f); acc[i][1] = vsplat(0.0f); }
    for (long k = 0; k < kc; k++) {
        ember_v16 b0 = vload(bp + k * EMBER_NR);
        ember_v16 b1 = vload(bp + k * EMBER_NR + 16);
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

void ember_tile_rows(int mr, long kc, const float *a, long a_rs, long a_ks, const float *bp,
                     float *c, long ldc, int ncols, const ember_epilogue *ep, long row0, long col0)
{
    switch (mr) {
    case 8: tile(8, kc, a, a_rs, a_ks, bp, c, ldc, ncols); break;
    case 7: tile(7, kc, a, a_rs, a_ks, bp, c, ldc, ncols); break;
    case 6: tile(6, kc, a, a_rs, a_ks, bp, c, ldc, ncols); break;
    case 5: tile(5, kc, a, a_rs, a_ks, bp, c, ldc, ncols); break;
    case 4: tile(4, kc, a, a_rs, a_ks, bp, c, ldc, ncols); break;
    case 3: tile(3, kc, a, a_rs, a_ks, bp, c, ldc, ncols); break;
    case 2: tile(2, kc, a, a_rs, a_ks, bp, c, ldc, ncols); break;
    default: tile(1, kc, a, a_rs, a_ks, bp, c, ldc, ncols); break;
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
