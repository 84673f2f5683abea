/* The bf16 GEMM (precision="bf16"): C[M, N] = A[M, K] * B[K, N] with both operands rounded to
 * bfloat16 (round to nearest even, denormals flushed to zero, as vcvtne2ps2bf16 does) and
 * products accumulated in float32 by vdpbf16ps (AVX512-BF16), which does two multiply-adds
 * per lane where an fp32 FMA does one. C, bias, residual and activation stay float32.
 *
 * Layouts (uint32_t words, each a pair of bf16: even k in the low half, odd k in the high):
 *   A blocks  [ceil(M/8)][ceil(K/2)][8]   word (kp, i) = (A[8b+i, 2kp], A[8b+i, 2kp+1]);
 *   B panels  [ceil(N/32)][ceil(K/2)][32] word (kp, j) = (B[2kp, 32p+j], B[2kp+1, 32p+j]);
 * zero beyond M, N and K. Compile-time weights arrive in these layouts (codegen/kernels/
 * gemm_bf16.py packs them); activations are converted while they are packed into scratch.
 *
 * The vdpbf16ps path is compiled per function (target attribute), whatever -march says, and
 * taken only where the CPU reports AVX512-BF16 at run time; elsewhere (another CPU, another
 * architecture) a portable path computes the same sums from the same rounded operands, so a
 * library never executes an instruction its CPU lacks. */
#include "ember_gemm.h"
#include "ember_math.h"

#if defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 11) || \
                            (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))
#define EMBER_BF16_X86 1
#include <immintrin.h>
#define EMBER_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#endif

#define BF16_PANEL_WORDS(kp) ((kp) * EMBER_NR)

/* float -> bfloat16 bits as vcvtneps2bf16 rounds: nearest even, denormals to signed zero,
 * NaN quieted. */
static inline uint32_t bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0) return (u >> 16) & 0x8000u;
    if ((u & 0x7fffffffu) > 0x7f800000u) return ((u >> 16) | 0x0040u) & 0xffffu;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
}

static inline float bf16_value(uint32_t bits)
{
    uint32_t u = (bits & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ------------------------------------------------------------------------------------------
 * Portable path */

static void bf16_pack_a_portable(uint32_t *blocks, const float *a, long lda, long M, long K, long b0, long b1)
{
    long kp_count = (K + 1) / 2;
    for (long b = b0; b < b1; b++)
        for (long kp = 0; kp < kp_count; kp++)
            for (int i = 0; i < EMBER_MR; i++) {
                long row = b * EMBER_MR + i, k = 2 * kp;
                uint32_t lo = 0, hi = 0;
                if (row < M) {
                    lo = bf16_bits(a[row * lda + k]);
                    hi = k + 1 < K ? bf16_bits(a[row * lda + k + 1]) : 0;
                }
                blocks[(b * kp_count + kp) * EMBER_MR + i] = lo | hi << 16;
            }
}

static void bf16_pack_panel_portable(uint32_t *panel, const float *b, long ldb, long K, int ncols)
{
    long kp_count = (K + 1) / 2;
    for (long kp = 0; kp < kp_count; kp++)
        for (int j = 0; j < EMBER_NR; j++) {
            uint32_t lo = 0, hi = 0;
            if (j < ncols) {
                lo = bf16_bits(b[2 * kp * ldb + j]);
                hi = 2 * kp + 1 < K ? bf16_bits(b[(2 * kp + 1) * ldb + j]) : 0;
            }
            panel[kp * EMBER_NR + j] = lo | hi << 16;
        }
}

/* A finished tile in memory into C: bias, then residual and activation (the order of the
 * fp32 tiles); float32 throughout. */
static void bf16_store_tile(float (*out)[EMBER_NR], int mr, float *c, long ldc, int ncols, const ember_epilogue *ep,
                       long row0, long col0)
{
    for (int i = 0; i < mr; i++) {
        if (ep && ep->bias) {
            if (ep->bias_per_row) for (int j = 0; j < ncols; j++) out[i][j] += ep->bias[row0 + i];
            else for (int j = 0; j < ncols; j++) out[i][j] += ep->bias[col0 + j];
        }
        memcpy(c + i * ldc, out[i], (size_t)ncols * sizeof(float));
        if (ep)
            ember_finish_span(c + i * ldc, ep->residual ? ep->residual + (row0 + i) * ep->ld_residual + col0 : NULL,
                              ncols, ep);
    }
}

/* vdpbf16ps's order within a pair: the odd product, then the even one. */
static void bf16_tile_portable(int mr, long kp_count, const uint32_t *ab, const uint32_t *bp, float *c, long ldc,
                          int ncols, const ember_epilogue *ep, long row0, long col0)
{
    float out[EMBER_MR][EMBER_NR];
    memset(out, 0, sizeof out);
    for (long kp = 0; kp < kp_count; kp++)
        for (int i = 0; i < mr; i++) {
            uint32_t a = ab[kp * EMBER_MR + i];
            float a0 = bf16_value(a), a1 = bf16_value(a >> 16);
            for (int j = 0; j < EMBER_NR; j++) {
                uint32_t b = bp[kp * EMBER_NR + j];
                out[i][j] += a1 * bf16_value(b >> 16);
                out[i][j] += a0 * bf16_value(b);
            }
        }
    bf16_store_tile(out, mr, c, ldc, ncols, ep, row0, col0);
}

/* ------------------------------------------------------------------------------------------
 * AVX512-BF16 path */

#ifdef EMBER_BF16_X86
EMBER_BF16_TARGET static void bf16_pack_a_native(uint32_t *blocks, const float *a, long lda, long M, long K, long b0,
                                            long b1)
{
    long kp_count = (K + 1) / 2;
    for (long b = b0; b < b1; b++)
        for (int i = 0; i < EMBER_MR; i++) {
            long row = b * EMBER_MR + i;
            uint32_t *dst = blocks + b * kp_count * EMBER_MR + i;
            if (row >= M) {
                for (long kp = 0; kp < kp_count; kp++) dst[kp * EMBER_MR] = 0;
                continue;
            }
            const float *src = a + row * lda;
            for (long k = 0; k < K; k += 32) {
                long left = K - k;
                __mmask16 m0 = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1u);
                __mmask16 m1 = left >= 32 ? 0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1u) : 0;
                __m512 lo = _mm512_maskz_loadu_ps(m0, src + k), hi = _mm512_maskz_loadu_ps(m1, src + k + 16);
                /* k .. k+31 in order: word t is k + t, so dword t is the pair kp = k/2 + t. */
                uint32_t pairs[16];
                _mm512_storeu_si512(pairs, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
                long n = (left + 1) / 2 < 16 ? (left + 1) / 2 : 16;
                for (long t = 0; t < n; t++) dst[(k / 2 + t) * EMBER_MR] = pairs[t];
            }
        }
}

EMBER_BF16_TARGET static void bf16_pack_panel_native(uint32_t *panel, const float *b, long ldb, long K, int ncols)
{
    /* Words of cvtne2ps(row1, row0): row0's 16 columns, then row1's; interleave them. */
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                                23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    __mmask16 m0 = ncols >= 16 ? 0xffff : (__mmask16)((1u << ncols) - 1u);
    __mmask16 m1 = ncols >= 32 ? 0xffff : ncols > 16 ? (__mmask16)((1u << (ncols - 16)) - 1u) : 0;
    long kp_count = (K + 1) / 2;
    for (long kp = 0; kp < kp_count; kp++) {
        const float *r0 = b + 2 * kp * ldb;
        __m512 lo0 = _mm512_maskz_loadu_ps(m0, r0), hi0 = _mm512_maskz_loadu_ps(m1, r0 + 16);
        __m512 lo1 = _mm512_setzero_ps(), hi1 = _mm512_setzero_ps();
        if (2 * kp + 1 < K) {
            lo1 = _mm512_maskz_loadu_ps(m0, r0 + ldb);
            hi1 = _mm512_maskz_loadu_ps(m1, r0 + ldb + 16);
        }
        __m512i lo = _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(lo1, lo0));
        __m512i hi = _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(hi1, hi0));
        _mm512_storeu_si512(panel + kp * EMBER_NR, lo);
        _mm512_storeu_si512(panel + kp * EMBER_NR + 16, hi);
    }
}

/* Bias, residual and activation on 16 columns of one row while they are in registers. */
EMBER_BF16_TARGET static inline __attribute__((always_inline)) __m512 bf16_finish_native(
    __m512 v, const ember_epilogue *ep, long row, long col)
{
    if (ep->bias) v = _mm512_add_ps(v, ep->bias_per_row ? _mm512_set1_ps(ep->bias[row]) : _mm512_loadu_ps(ep->bias + col));
    if (ep->residual) v = _mm512_add_ps(v, _mm512_loadu_ps(ep->residual + row * ep->ld_residual + col));
    switch (ep->act) {
    case EMBER_ACT_NONE: return v;
    /* max(0, v) keeps NaN, as np.maximum does (the second operand is returned on NaN). */
    case EMBER_ACT_RELU: return _mm512_max_ps(_mm512_setzero_ps(), v);
    case EMBER_ACT_CLIP: return _mm512_min_ps(_mm512_set1_ps(ep->beta), _mm512_max_ps(_mm512_set1_ps(ep->alpha), v));
    default: {
        float tmp[16];
        _mm512_storeu_ps(tmp, v);
        for (int j = 0; j < 16; j++) tmp[j] = ember_activate(tmp[j], ep);
        return _mm512_loadu_ps(tmp);
    }
    }
}

/* One mr x 32 tile over all of K; `mr` is a constant in each instantiation. One or two rows
 * (a GEMV) split the pairs four ways into independent sums to cover vdpbf16ps's latency. */
EMBER_BF16_TARGET static inline __attribute__((always_inline)) void bf16_tile_native(
    int mr, long kp_count, const uint32_t *ab, const uint32_t *bp, float *c, long ldc, int ncols,
    const ember_epilogue *ep, long row0, long col0)
{
    __m512 acc[EMBER_MR][2];
    for (int i = 0; i < EMBER_MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    long kp = 0;
    if (mr <= 2) {
        __m512 part[2][2][4];
        for (int i = 0; i < 2; i++)
            for (int h = 0; h < 2; h++)
                for (int s = 0; s < 4; s++) part[i][h][s] = _mm512_setzero_ps();
        for (; kp + 4 <= kp_count; kp += 4) {
            #pragma GCC unroll 4
            for (int s = 0; s < 4; s++) {
                __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + (kp + s) * EMBER_NR);
                __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + (kp + s) * EMBER_NR + 16);
                #pragma GCC unroll 2
                for (int i = 0; i < 2; i++) {
                    if (i < mr) {
                        __m512bh a = (__m512bh)_mm512_set1_epi32((int)ab[(kp + s) * EMBER_MR + i]);
                        part[i][0][s] = _mm512_dpbf16_ps(part[i][0][s], a, b0);
                        part[i][1][s] = _mm512_dpbf16_ps(part[i][1][s], a, b1);
                    }
                }
            }
        }
        for (int i = 0; i < 2 && i < mr; i++)
            for (int h = 0; h < 2; h++)
                acc[i][h] = _mm512_add_ps(_mm512_add_ps(part[i][h][0], part[i][h][1]),
                                          _mm512_add_ps(part[i][h][2], part[i][h][3]));
    }
    for (; kp < kp_count; kp++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + kp * EMBER_NR);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + kp * EMBER_NR + 16);
        #pragma GCC unroll 8
        for (int i = 0; i < EMBER_MR; i++) {
            if (i < mr) {
                __m512bh a = (__m512bh)_mm512_set1_epi32((int)ab[kp * EMBER_MR + i]);
                acc[i][0] = _mm512_dpbf16_ps(acc[i][0], a, b0);
                acc[i][1] = _mm512_dpbf16_ps(acc[i][1], a, b1);
            }
        }
    }
    if (ncols == EMBER_NR) {
        #pragma GCC unroll 8
        for (int i = 0; i < EMBER_MR; i++) {
            if (i < mr) {
                __m512 v0 = acc[i][0], v1 = acc[i][1];
                if (ep) { v0 = bf16_finish_native(v0, ep, row0 + i, col0); v1 = bf16_finish_native(v1, ep, row0 + i, col0 + 16); }
                _mm512_storeu_ps(c + i * ldc, v0);
                _mm512_storeu_ps(c + i * ldc + 16, v1);
            }
        }
        return;
    }
    float out[EMBER_MR][EMBER_NR];
    for (int i = 0; i < mr; i++) {
        _mm512_storeu_ps(out[i], acc[i][0]);
        _mm512_storeu_ps(out[i] + 16, acc[i][1]);
    }
    bf16_store_tile(out, mr, c, ldc, ncols, ep, row0, col0);
}

EMBER_BF16_TARGET static void bf16_tile_rows_native(int mr, long kp_count, const uint32_t *ab, const uint32_t *bp,
                                               float *c, long ldc, int ncols, const ember_epilogue *ep, long row0,
                                               long col0)
{
    if (ep && ep->act == EMBER_ACT_GELU) {
        /* Gelu as one vector loop over the whole tile, after the tile stored the rest of the
         * epilogue in a buffer: in bf16_finish_native it would be a call per value, and a
         * case of its own in the tile changes the tile's code for every other epilogue. */
        float out[EMBER_MR][EMBER_NR];
        if (ncols < EMBER_NR) memset(out, 0, sizeof out);  /* the columns the tile leaves */
        ember_epilogue rest = *ep;
        rest.act = EMBER_ACT_NONE;
        bf16_tile_rows_native(mr, kp_count, ab, bp, &out[0][0], EMBER_NR, ncols, &rest, row0, col0);
        float *flat = &out[0][0];
        for (int t = 0; t < mr * EMBER_NR; t++) flat[t] = ember_geluf(flat[t]);
        for (int i = 0; i < mr; i++) memcpy(c + i * ldc, out[i], (size_t)ncols * sizeof(float));
        return;
    }
    switch (mr) {
    case 8: bf16_tile_native(8, kp_count, ab, bp, c, ldc, ncols, ep, row0, col0); break;
    case 7: bf16_tile_native(7, kp_count, ab, bp, c, ldc, ncols, ep, row0, col0); break;
    case 6: bf16_tile_native(6, kp_count, ab, bp, c, ldc, ncols, ep, row0, col0); break;
    case 5: bf16_tile_native(5, kp_count, ab, bp, c, ldc, ncols, ep, row0, col0); break;
    case 4: bf16_tile_native(4, kp_count, ab, bp, c, ldc, ncols, ep, row0, col0); break;
    case 3: bf16_tile_native(3, kp_count, ab, bp, c, ldc, ncols, ep, row0, col0); break;
    case 2: bf16_tile_native(2, kp_count, ab, bp, c, ldc, ncols, ep, row0, col0); break;
    default: bf16_tile_native(1, kp_count, ab, bp, c, ldc, ncols, ep, row0, col0); break;
    }
}
#endif

/* ------------------------------------------------------------------------------------------
 * Dispatch and the driver */

/* -DEMBER_BF16_PORTABLE forces the portable path (the tests compare the two). */
static int bf16_native(void)
{
#if defined(EMBER_BF16_X86) && !defined(EMBER_BF16_PORTABLE)
    static int known = -1;  /* idempotent: a race writes the same answer */
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") ? 1 : 0;
    }
    return known;
#else
    return 0;
#endif
}

int ember_bf16_native(void) { return bf16_native(); }

void ember_bf16_pack_a(uint32_t *blocks, const float *a, long lda, long M, long K, long block0, long block1)
{
#ifdef EMBER_BF16_X86
    if (bf16_native()) { bf16_pack_a_native(blocks, a, lda, M, K, block0, block1); return; }
#endif
    bf16_pack_a_portable(blocks, a, lda, M, K, block0, block1);
}

void ember_bf16_pack_panel(uint32_t *panel, const float *b, long ldb, long K, int ncols)
{
#ifdef EMBER_BF16_X86
    if (bf16_native()) { bf16_pack_panel_native(panel, b, ldb, K, ncols); return; }
#endif
    bf16_pack_panel_portable(panel, b, ldb, K, ncols);
}

/* Panels per chunk: a chunk stays in L2 while every row block of A sweeps it. */
static long bf16_chunk_panels(long kp_count, long panels)
{
    long depth = kp_count > 0 ? kp_count : 1;
    long chunk = EMBER_CHUNK_BYTES / (depth * EMBER_NR * (long)sizeof(uint32_t));
    if (chunk < 1) chunk = 1;
    return chunk < panels ? chunk : panels;
}

long ember_gemm_bf16_scratch_bytes(long M, long N, long K, int a_packed, int b_packed, int b_repacked,
                                   int nthreads)
{
    long kp_count = (K + 1) / 2, panels = (N + EMBER_NR - 1) / EMBER_NR;
    long a_words = a_packed ? 0 : (M + EMBER_MR - 1) / EMBER_MR * kp_count * EMBER_MR;
    if (b_packed) return a_words * 4;
    long temp = b_repacked ? K * EMBER_NR : 0;  /* floats of one fp32 panel from the packer */
    long per_thread = bf16_chunk_panels(kp_count, panels) * BF16_PANEL_WORDS(kp_count) + temp;
    long threaded = per_thread * nthreads, shared = panels * BF16_PANEL_WORDS(kp_count) + temp * nthreads;
    return (a_words + (threaded > shared ? threaded : shared)) * 4;
}

typedef struct {
    long M, N, K, kp_count;
    const uint32_t *ap;
    ember_packer pack;
    const void *pack_ctx;
    const float *b;
    long ldb;
    float *c;
    long ldc;
    const ember_epilogue *ep;
    int native;
} bf16_gemm;

static void bf16_sweep(const bf16_gemm *g, const uint32_t *panels, long p0, long p1, long m0, long m1)
{
    for (long r = m0; r < m1; r += EMBER_MR) {
        int mr = g->M - r < EMBER_MR ? (int)(g->M - r) : EMBER_MR;
        const uint32_t *ab = g->ap + (r / EMBER_MR) * g->kp_count * EMBER_MR;
        for (long p = p0; p < p1; p++) {
            long col0 = p * EMBER_NR;
            int ncols = g->N - col0 < EMBER_NR ? (int)(g->N - col0) : EMBER_NR;
            const uint32_t *bp = panels + (p - p0) * BF16_PANEL_WORDS(g->kp_count);
            float *ct = g->c + r * g->ldc + col0;
#ifdef EMBER_BF16_X86
            if (g->native) { bf16_tile_rows_native(mr, g->kp_count, ab, bp, ct, g->ldc, ncols, g->ep, r, col0); continue; }
#endif
            bf16_tile_portable(mr, g->kp_count, ab, bp, ct, g->ldc, ncols, g->ep, r, col0);
        }
    }
}

/* Panel p of B in bf16 pairs: through the fp32 packer into `temp`, or from B's rows. */
static void bf16_make_panel(const bf16_gemm *g, uint32_t *dst, float *temp, long p)
{
    long col0 = p * EMBER_NR;
    if (g->pack) {
        g->pack(temp, g->pack_ctx, col0);
        ember_bf16_pack_panel(dst, temp, EMBER_NR, g->K, EMBER_NR);
    } else {
        ember_bf16_pack_panel(dst, g->b + col0, g->ldb, g->K, g->N - col0 < EMBER_NR ? (int)(g->N - col0) : EMBER_NR);
    }
}

void ember_gemm_bf16(long M, long N, long K, const uint32_t *ap, const float *a, long lda, const uint32_t *bp,
                     ember_packer pack, const void *pack_ctx, const float *b, long ldb, float *c, long ldc,
                     const ember_epilogue *ep, void *scratch, int nthreads)
{
    if (M <= 0 || N <= 0) return;
    if (ep && !ep->bias && !ep->residual && ep->act == EMBER_ACT_NONE) ep = NULL;
    long kp_count = (K + 1) / 2, panels = (N + EMBER_NR - 1) / EMBER_NR, row_blocks = (M + EMBER_MR - 1) / EMBER_MR;
    long panel_words = BF16_PANEL_WORDS(kp_count);
    uint32_t *free_words = (uint32_t *)scratch;
    if (!ap) {
        uint32_t *blocks = free_words;
        free_words += row_blocks * kp_count * EMBER_MR;
        if (nthreads <= 1 || row_blocks < 2) {
            ember_bf16_pack_a(blocks, a, lda, M, K, 0, row_blocks);
        } else {
            #pragma omp parallel for num_threads(nthreads) schedule(static)
            for (long rb = 0; rb < row_blocks; rb++) ember_bf16_pack_a(blocks, a, lda, M, K, rb, rb + 1);
        }
        ap = blocks;
    }
    bf16_gemm g = { M, N, K, kp_count, ap, pack, pack_ctx, b, ldb, c, ldc, ep, bf16_native() };
    long chunk = bf16_chunk_panels(kp_count, panels), chunks = (panels + chunk - 1) / chunk;
    if (bp) {
        /* Items (chunk, row block), row blocks inner: consecutive items share a chunk in L2. */
        long items = chunks * row_blocks;
        if (nthreads <= 1 || items <= 1) {
            for (long ch = 0; ch < chunks; ch++) {
                long p0 = ch * chunk, p1 = p0 + chunk < panels ? p0 + chunk : panels;
                bf16_sweep(&g, bp + p0 * panel_words, p0, p1, 0, M);
            }
            return;
        }
        #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
        for (long item = 0; item < items; item++) {
            long ch = item / row_blocks, rb = item % row_blocks;
            long p0 = ch * chunk, p1 = p0 + chunk < panels ? p0 + chunk : panels;
            long m0 = rb * EMBER_MR, m1 = m0 + EMBER_MR < M ? m0 + EMBER_MR : M;
            bf16_sweep(&g, bp + p0 * panel_words, p0, p1, m0, m1);
        }
        return;
    }
    long temp_floats = pack ? K * EMBER_NR : 0;
    long per_thread = chunk * panel_words + temp_floats;
    if (nthreads <= 1 || chunks >= 2L * nthreads) {
        /* Each thread packs a chunk of panels and sweeps every row block over it. */
        if (nthreads <= 1) {
            float *temp = (float *)(free_words + chunk * panel_words);
            for (long ch = 0; ch < chunks; ch++) {
                long p0 = ch * chunk, p1 = p0 + chunk < panels ? p0 + chunk : panels;
                for (long p = p0; p < p1; p++) bf16_make_panel(&g, free_words + (p - p0) * panel_words, temp, p);
                bf16_sweep(&g, free_words, p0, p1, 0, M);
            }
            return;
        }
        #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
        for (long ch = 0; ch < chunks; ch++) {
            uint32_t *mine = free_words + (long)ember_thread_num() * per_thread;
            float *temp = (float *)(mine + chunk * panel_words);
            long p0 = ch * chunk, p1 = p0 + chunk < panels ? p0 + chunk : panels;
            for (long p = p0; p < p1; p++) bf16_make_panel(&g, mine + (p - p0) * panel_words, temp, p);
            bf16_sweep(&g, mine, p0, p1, 0, M);
        }
        return;
    }
    /* Few chunks for the threads: pack every panel once, then split the rows too. */
    uint32_t *all = free_words;
    float *temps = (float *)(all + panels * panel_words);
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (long p = 0; p < panels; p++)
        bf16_make_panel(&g, all + p * panel_words, temps + (long)ember_thread_num() * temp_floats, p);
    long items = chunks * row_blocks;
    #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
    for (long item = 0; item < items; item++) {
        long ch = item / row_blocks, rb = item % row_blocks;
        long p0 = ch * chunk, p1 = p0 + chunk < panels ? p0 + chunk : panels;
        long m0 = rb * EMBER_MR, m1 = m0 + EMBER_MR < M ? m0 + EMBER_MR : M;
        bf16_sweep(&g, all + p0 * panel_words, p0, p1, m0, m1);
    }
}
