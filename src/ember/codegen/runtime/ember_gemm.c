/* Definitions for ember_gemm.h (see there). */
#define EMBER_SIMD_BUILTINS 1 /* ember_simd.h: no <immintrin.h> needed (compile time) */
#include "ember_gemm.h"
#include "ember_math.h"
#include "ember_simd.h"

/* The tiles (ember_gemm_tiles.h, included below) are written for this shape: 8 rows (one
 * instantiation per row count, see EMBER_ROWS_FAMILY) by 32 columns (two 16-lane vectors). */
#if EMBER_MR != 8 || EMBER_NR != 32
#error "ember_gemm.c's tiles assume EMBER_MR == 8 and EMBER_NR == 32"
#endif

/* Each register-tile instantiation lives in a function of its own (a row block's sweep
 * over the panels, or one half-width tile): gcc's time on one function holding them all grew
 * faster than their number (9.4 s for this file, against 3 s). The cpu backend also compiles
 * the file in pieces, in parallel, defining EMBER_GEMM_PIECE: 0 for everything but the tiles,
 * or one family of tile functions (which are then hidden functions of the library
 * rather than static ones). Without it (bundles, tests) the file is whole. Every piece
 * compiles the same code as the whole file: the functions crossing pieces are `noipa` and the
 * helpers the tiles call explicitly (no)inline, so neither the unit's size (which sets gcc's
 * inlining budget) nor what else it holds changes a function. */
#define EMBER_TILES_FULL 1    /* row blocks, B's rows at bp + k * b_ks */
#define EMBER_TILES_OFFSETS 2 /* row blocks, B's rows at bp + koff[k] (direct convolution) */
#define EMBER_TILES_HALF 3    /* a last panel of at most 16 columns */
#define EMBER_TILES_TAPS 4    /* row blocks, A's rows at ab + i * a_rs + aoff[k] (a convolution's taps) */
#ifdef EMBER_GEMM_PIECE
#define EMBER_GEMM_CORE (EMBER_GEMM_PIECE == 0)
#define EMBER_GEMM_TILES(family) (EMBER_GEMM_PIECE == (family))
#define EMBER_GEMM_ANY_TILES (EMBER_GEMM_PIECE != 0)
#define EMBER_TILE_LINKAGE __attribute__((visibility("hidden")))
#else
#define EMBER_GEMM_ANY_TILES 1
#define EMBER_GEMM_CORE 1
#define EMBER_GEMM_TILES(family) 1
#define EMBER_TILE_LINKAGE static
#endif

#if EMBER_GEMM_CORE

float ember_activate(float v, const ember_epilogue *ep)
{
    switch (ep->act) {
    case EMBER_ACT_RELU: return v < 0.0f ? 0.0f : v;  /* NaN stays NaN, as in np.maximum */
    case EMBER_ACT_CLIP: return v < ep->alpha ? ep->alpha : (v > ep->beta ? ep->beta : v);
    case EMBER_ACT_LEAKY_RELU: return v >= 0.0f ? v : v * ep->alpha;
    case EMBER_ACT_SIGMOID: return ember_sigmoidf(v);
    case EMBER_ACT_TANH: return ember_tanhf(v);
    case EMBER_ACT_HARD_SIGMOID: { float h = v * ep->alpha + ep->beta; return h < 0.0f ? 0.0f : (h > 1.0f ? 1.0f : h); }
    case EMBER_ACT_GELU: return ember_geluf(v);
    case EMBER_ACT_HARD_SWISH: return ember_hard_swishf(v, ep->alpha, ep->beta);
    case EMBER_ACT_SILU: return v * ember_sigmoidf(v);
    default: return v;
    }
}

void ember_finish_span(float *y, const float *residual, long n, const ember_epilogue *ep)
{
    if (residual) for (long j = 0; j < n; j++) y[j] += residual[j];
    switch (ep->act) {
    case EMBER_ACT_NONE: break;
    case EMBER_ACT_RELU: for (long j = 0; j < n; j++) y[j] = y[j] < 0.0f ? 0.0f : y[j]; break;
    case EMBER_ACT_CLIP:
        for (long j = 0; j < n; j++) {
            float v = y[j];
            v = v < ep->alpha ? ep->alpha : v;
            y[j] = v > ep->beta ? ep->beta : v;
        }
        break;
    /* Loops GCC vectorizes (ember_math.h's functions are branch-free): the GEMM tiles' epilogue
     * for these activations and the depthwise kernels' come here, where per-value calls of
     * ember_activate ran a SiLU 1x1 convolution on a 20-pixel map at a third of its speed. */
    case EMBER_ACT_GELU: for (long j = 0; j < n; j++) y[j] = ember_geluf(y[j]); break;
    case EMBER_ACT_SIGMOID: for (long j = 0; j < n; j++) y[j] = ember_sigmoidf(y[j]); break;
    case EMBER_ACT_TANH: for (long j = 0; j < n; j++) y[j] = ember_tanhf(y[j]); break;
    case EMBER_ACT_SILU: for (long j = 0; j < n; j++) y[j] = y[j] * ember_sigmoidf(y[j]); break;
    case EMBER_ACT_HARD_SWISH: {
        const float alpha = ep->alpha, beta = ep->beta;
        for (long j = 0; j < n; j++) y[j] = ember_hard_swishf(y[j], alpha, beta);
        break;
    }
    case EMBER_ACT_HARD_SIGMOID: {
        const float alpha = ep->alpha, beta = ep->beta;
        for (long j = 0; j < n; j++) {
            float h = y[j] * alpha + beta;
            y[j] = h < 0.0f ? 0.0f : (h > 1.0f ? 1.0f : h);
        }
        break;
    }
    default: for (long j = 0; j < n; j++) y[j] = ember_activate(y[j], ep);
    }
}

#endif

/* The tiles' out-of-line helpers (stores through memory, activations without a vector case)
 * are defined once, in the core piece, where the file is compiled in pieces (hidden functions
 * then, `noipa` as the tiles are): each tile piece compiled its own copies before, 0.2 s of gcc
 * a piece. They are not specialised per row count either: a copy for the constant mr of each
 * tile function (gcc's choice) bought nothing measurable and cost 40% of the tiles' compile
 * time. */
#define EMBER_TILE_HELPER EMBER_TILE_LINKAGE __attribute__((noinline, noipa, unused))

/* A finished tile held in memory (`out`, 32 floats a row) into C's rows (or columns, when
 * transposed), bias, residual and activation applied on the way. */
EMBER_TILE_HELPER void ember_tile_store_rows(float (*out)[EMBER_NR], int mr, float *c, long ldc, int ncols,
                                             const ember_epilogue *ep, long row0, long col0);
#if EMBER_GEMM_CORE
EMBER_TILE_HELPER void ember_tile_store_rows(float (*out)[EMBER_NR], int mr, float *c, long ldc, int ncols,
                                             const ember_epilogue *ep, long row0, long col0)
{
    if (ep && ep->transposed) {  /* c points at (row0, col0) of the transposed C */
        /* Bias (per column), residual (read transposed) and activation on the tile in memory,
         * in the order the registers path uses; then the transposed copy. */
        if (ep->bias)
            for (int i = 0; i < mr; i++)
                for (int j = 0; j < ncols; j++) out[i][j] += ep->bias[col0 + j];
        if (ep->residual)
            for (int j = 0; j < ncols; j++) {
                const float *r = ep->residual + (col0 + j) * ep->ld_residual + row0;
                for (int i = 0; i < mr; i++) out[i][j] += r[i];
            }
        for (int i = 0; i < mr; i++) ember_finish_span(out[i], NULL, ncols, ep);
        for (int j = 0; j < ncols; j++) {
            float *dst = c + j * ldc;
            for (int i = 0; i < mr; i++) dst[i] = out[i][j];
        }
        return;
    }
    for (int i = 0; i < mr; i++) {
        if (ep && ep->bias) {
            if (ep->bias_per_row) for (int j = 0; j < EMBER_NR; j++) out[i][j] += ep->bias[row0 + i];
            else for (int j = 0; j < ncols; j++) out[i][j] += ep->bias[col0 + j];
        }
        memcpy(c + i * ldc, out[i], (size_t)ncols * sizeof(float));
        if (ep)
            ember_finish_span(c + i * ldc, ep->residual ? ep->residual + (row0 + i) * ep->ld_residual + col0 : NULL,
                              ncols, ep);
    }
}
#endif

/* Tile columns [s, s + run) lie on one row of the output grid (see ember_epilogue.grid_w);
 * the first `kept` of them are output columns, stored from output position `at` on. Returns
 * run. */
static inline __attribute__((unused)) int grid_run(const ember_epilogue *ep, long col0, int s, int ncols, int *kept, long *at)
{
    long q = col0 + s, gj = q % ep->grid_w;
    int run = ep->grid_w - gj < ncols - s ? (int)(ep->grid_w - gj) : ncols - s;
    *kept = gj < ep->out_w ? (ep->out_w - gj < run ? (int)(ep->out_w - gj) : run) : 0;
    *at = q / ep->grid_w * ep->out_w + gj;
    return run;
}

/* B's source for one chunk of panels: pre-packed, packed into scratch, or read in place. */
typedef struct {
    const float *panels; /* packed panels of this chunk, or NULL when reading in place */
    const float *direct; /* row-major B for in-place reads of full panels */
    long ldb;
    const float *tail;   /* packed copy of a partial last panel (in-place mode) */
    const int32_t *koff; /* in-place rows at direct + koff[k] (any column count; caller pads) */
    const int32_t *aoff; /* A's element (i, k) at a[i * a_rs + aoff[k]] (ember_gemm_taps), B packed */
} ember_bsource;

/* The parameters of a function computing the tiles of one row block (row_block below). */
#define EMBER_ROWS_PARAMS \
    long K, const float *ab, long a_rs, long a_ks, const ember_bsource *b, long p0, long p1, long N, float *c, \
    long ldc, const ember_epilogue *ep, long r

/* Without 512-bit vectors the register tile below does not fit the register file (see
 * tile_portable), so every such target, JIT host or AOT bundle, takes the portable tile. */
#if !defined(__AVX512F__) && !defined(EMBER_PORTABLE_TILE)
#define EMBER_PORTABLE_TILE 1
#endif

/* The AVX-512 register tile and its row-block functions (the micro-kernel this file drives). */
#include "ember_gemm_tiles.h"

#if defined(EMBER_PORTABLE_TILE) && EMBER_GEMM_CORE
/* The tile for targets without 512-bit vectors (AVX2, SSE, NEON, Cortex-M, RV64), where the
 * 16 x 16-lane accumulators of `tile` split into more values than the registers hold (and GCC
 * takes minutes and ~0.5 MB of code per instantiation). In native vectors (ember_vn: 8 lanes
 * with AVX, 4 otherwise; 16 where forced on AVX-512) it runs 4 rows x 2 vectors of
 * columns at a time: 8 accumulators, two B vectors and one broadcast fit 16 registers, and
 * each k does 8 multiply-adds for 6 loads. Rows past mr repeat the last row (computed, never
 * stored). Reads all 32 columns of B, as `tile` does. */
static void tile_portable(int mr, long kc, const float *a, long a_rs, long a_ks, const int32_t *aoff,
                          const float *bp, long b_ks, const int32_t *koff, float *c, long ldc, int ncols,
                          const ember_epilogue *ep, long row0, long col0)
{
    float out[EMBER_MR][EMBER_NR];
    for (int r = 0; r < mr; r += 4) {
        const float *ar[4];
        for (int i = 0; i < 4; i++) ar[i] = a + (r + i < mr ? r + i : mr - 1) * a_rs;
        for (int h = 0; h < EMBER_NR; h += 2 * EMBER_VN_LANES) {
            ember_vn acc[4][2];
            for (int i = 0; i < 4; i++) acc[i][0] = acc[i][1] = vn_splat(0.0f);
            for (long k = 0; k < kc; k++) {
                const float *bk = (koff ? bp + koff[k] : bp + k * b_ks) + h;
                ember_vn b0 = vn_load(bk), b1 = vn_load(bk + EMBER_VN_LANES);
                for (int i = 0; i < 4; i++) {
                    float ai = aoff ? ar[i][aoff[k]] : ar[i][k * a_ks];
                    acc[i][0] += ai * b0;
                    acc[i][1] += ai * b1;
                }
            }
            for (int i = 0; i < 4 && r + i < mr; i++) {
                vn_store(out[r + i] + h, acc[i][0]);
                vn_store(out[r + i] + h + EMBER_VN_LANES, acc[i][1]);
            }
        }
    }
    if (!(ep && ep->grid_w)) {
        ember_tile_store_rows(out, mr, c, ldc, ncols, ep, row0, col0);
        return;
    }
    /* Onto the output grid: the kept columns of each run, then their epilogue. */
    int kept;
    long at;
    for (int s = 0, run; s < ncols; s += run) {
        run = grid_run(ep, col0, s, ncols, &kept, &at);
        for (int i = 0; i < mr && kept > 0; i++) {
            float *dst = c - col0 + i * ldc + at, b = ep->bias ? ep->bias[row0 + i] : 0.0f;
            for (int j = 0; j < kept; j++) dst[j] = out[i][s + j] + b;
            ember_finish_span(dst, ep->residual ? ep->residual + (row0 + i) * ep->ld_residual + at : NULL, kept, ep);
        }
    }
}
#endif

#if EMBER_GEMM_CORE
#ifndef EMBER_PORTABLE_TILE
#define EMBER_ROWS_DECLARE(FAMILY) \
    EMBER_TILE_LINKAGE void ember_rows_##FAMILY##_1(EMBER_ROWS_PARAMS), ember_rows_##FAMILY##_2(EMBER_ROWS_PARAMS), \
        ember_rows_##FAMILY##_3(EMBER_ROWS_PARAMS), ember_rows_##FAMILY##_4(EMBER_ROWS_PARAMS), \
        ember_rows_##FAMILY##_5(EMBER_ROWS_PARAMS), ember_rows_##FAMILY##_6(EMBER_ROWS_PARAMS), \
        ember_rows_##FAMILY##_7(EMBER_ROWS_PARAMS), ember_rows_##FAMILY##_8(EMBER_ROWS_PARAMS);
EMBER_ROWS_DECLARE(plain)
EMBER_ROWS_DECLARE(offsets)
EMBER_ROWS_DECLARE(taps)
#define EMBER_ROWS_CALL(FAMILY) \
    switch (mr) { \
    case 8: ember_rows_##FAMILY##_8(K, ab, a_rs, a_ks, b, p0, p1, N, c, ldc, ep, r); break; \
    case 7: ember_rows_##FAMILY##_7(K, ab, a_rs, a_ks, b, p0, p1, N, c, ldc, ep, r); break; \
    case 6: ember_rows_##FAMILY##_6(K, ab, a_rs, a_ks, b, p0, p1, N, c, ldc, ep, r); break; \
    case 5: ember_rows_##FAMILY##_5(K, ab, a_rs, a_ks, b, p0, p1, N, c, ldc, ep, r); break; \
    case 4: ember_rows_##FAMILY##_4(K, ab, a_rs, a_ks, b, p0, p1, N, c, ldc, ep, r); break; \
    case 3: ember_rows_##FAMILY##_3(K, ab, a_rs, a_ks, b, p0, p1, N, c, ldc, ep, r); break; \
    case 2: ember_rows_##FAMILY##_2(K, ab, a_rs, a_ks, b, p0, p1, N, c, ldc, ep, r); break; \
    default: ember_rows_##FAMILY##_1(K, ab, a_rs, a_ks, b, p0, p1, N, c, ldc, ep, r); break; \
    }
#endif

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

/* Panels are processed in chunks of at most EMBER_CHUNK_BYTES (ember_config.h) that stay in
 * L2 while every EMBER_MR-row block of A sweeps them, so each A block is loaded once per chunk
 * and each panel once per row block from L2. */
static long chunk_panels(long K, long panels)
{
    /* K = 0 (an empty sum) still sweeps the tiles: they apply the epilogue to zeros. */
    long depth = K > 0 ? K : 1;
    long chunk = EMBER_CHUNK_BYTES / (depth * EMBER_NR * (long)sizeof(float));
    if (chunk < 1) chunk = 1;
    return chunk < panels ? chunk : panels;
}

/* How many chunks the panels go in: enough that none exceeds chunk_panels (which sizes the
 * scratch), rounded up to a multiple of the thread count (ember_gemm's test of whether there
 * is column work for every thread). Sizes differ by at most one, larger first (chunk_start). */
static long balanced_chunks(long K, long panels, int nthreads)
{
    long chunk = chunk_panels(K, panels);
    long chunks = (panels + chunk - 1) / chunk;
    if (nthreads > 1) chunks = (chunks + nthreads - 1) / nthreads * nthreads;
    return chunks < panels ? chunks : panels;
}

static inline long chunk_start(long ch, long chunks, long panels)
{
    long base = panels / chunks, extra = panels % chunks;
    return ch * base + (ch < extra ? ch : extra);
}

long ember_gemm_scratch_bytes(long N, long K, int nthreads)
{
    long panels = (N + EMBER_NR - 1) / EMBER_NR;
    long per_thread = chunk_panels(K, panels) * K * EMBER_NR * (long)sizeof(float);
    long shared = panels * K * EMBER_NR * (long)sizeof(float);
    long threaded = per_thread * nthreads;
    return threaded > shared ? threaded : shared;
}

static inline void sweep(long M, long K, const float *a, long a_rs, long a_ks, long a_block,
                         const ember_bsource *b, long p0, long p1, long N, float *c, long ldc,
                         const ember_epilogue *ep, long m0, long m1)
{
    for (long r = m0; r < m1; r += EMBER_MR) {
        int mr = M - r < EMBER_MR ? (int)(M - r) : EMBER_MR;
        const float *ab = a + (r / EMBER_MR) * a_block;
#ifdef EMBER_PORTABLE_TILE
        for (long p = p0; p < p1; p++) {
            long col0 = p * EMBER_NR;
            int ncols = N - col0 < EMBER_NR ? (int)(N - col0) : EMBER_NR;
            const float *bp;
            long b_ks;
            const int32_t *koff = NULL;
            if (b->panels) { bp = b->panels + (p - p0) * K * EMBER_NR; b_ks = EMBER_NR; }
            else if (b->koff) { bp = b->direct + col0; b_ks = 0; koff = b->koff; }
            else if (ncols == EMBER_NR) { bp = b->direct + col0; b_ks = b->ldb; }
            else { bp = b->tail; b_ks = EMBER_NR; }
            float *ct = ep && ep->transposed ? c + col0 * ldc + r : c + r * ldc + col0;
            tile_portable(mr, K, ab, a_rs, a_ks, b->aoff, bp, b_ks, koff, ct, ldc, ncols, ep, r, col0);
        }
#else
        /* Separate instantiations, so the common path carries no offset-table load. */
        if (b->koff) { EMBER_ROWS_CALL(offsets) }
        else if (b->aoff) { EMBER_ROWS_CALL(taps) }
        else { EMBER_ROWS_CALL(plain) }
#endif
    }
}

/* Panels [q0, q1) against rows [m0, m1), chunk by chunk (chunk outer: each chunk stays in L2
 * while the rows sweep it). */
static void sweep_chunks(long M, long K, const float *a, long a_rs, long a_ks, long a_block, const ember_bsource *b,
                         long q0, long q1, long N, float *c, long ldc, const ember_epilogue *ep, long m0, long m1)
{
    long chunk = chunk_panels(K, q1 - q0);
    for (long p0 = q0; p0 < q1; p0 += chunk)
        sweep(M, K, a, a_rs, a_ks, a_block, b, p0, p0 + chunk < q1 ? p0 + chunk : q1, N, c, ldc, ep, m0, m1);
}

/* Thread t's run of panels when threads split them statically: equal shares (within one),
 * contiguous, the same every call. Equal chunks dealt in runs would not do: 12 chunks of 3 or
 * 2 panels gave one thread 18 panels of 32 (1024^3 GEMM: 14% slower on 2 threads). */
static inline void thread_panels(long t, int nthreads, long panels, long *q0, long *q1)
{
    *q0 = panels * t / nthreads;
    *q1 = panels * (t + 1) / nthreads;
}

/* Panels [p0, p1) against all rows, packed into `mine` first unless B is pre-packed. */
static void chunk_sweep(long M, long N, long K, const float *a, long a_rs, long a_ks, long a_block,
                        const float *bp, ember_packer pack, const void *pack_ctx, float *c, long ldc,
                        const ember_epilogue *ep, float *mine, long p0, long p1)
{
    long panel_floats = K * EMBER_NR;
    ember_bsource src = { NULL, NULL, 0, NULL, NULL, NULL };
    if (bp) {
        src.panels = bp + p0 * panel_floats;
    } else {
        for (long p = p0; p < p1; p++) pack(mine + (p - p0) * panel_floats, pack_ctx, p * EMBER_NR);
        src.panels = mine;
    }
    sweep(M, K, a, a_rs, a_ks, a_block, &src, p0, p1, N, c, ldc, ep, 0, M);
}

/* Whether a weight-streaming GEMM (a few rows against compile-time panels, on one thread)
 * sweeps its chunks of panels last to first this call: every other call for the same B. Each
 * call then starts on the panels the previous one read last, still in the cache, where a model
 * whose weights overflow the L2 a little would otherwise miss on every line (a cache keeping the
 * most recently used lines evicts, sweep after sweep in the same order, each line just before
 * it is read again): an MLP with 2.6 MB of weights against a 2 MB L2 ran 73-77 against 87-96 us
 * (Xeon, 1 thread). The order of independent column panels does not change a result. B's
 * address picks the call's flag: two B that share a slot only alternate less. */
static int sweep_backwards(const float *bp)
{
    /* Per thread (a thread alternates its own calls): one array shared by the threads put an
     * atomic on a line both cores wrote at every call, which made a GRU on 2 threads, whose
     * steps are small GEMMs on both, 13% slower. */
#ifdef _OPENMP
    static __thread unsigned char flips[64];
#else
    static unsigned char flips[64];
#endif
    unsigned slot = (unsigned)((uint32_t)((uintptr_t)bp >> 6) * 2654435761u >> 26);
    return flips[slot] ^= 1;
}

void ember_gemm_taps(long M, long N, long K, const float *a, long a_rs, const int32_t *aoff, const float *bp,
                     long p0, long p1, float *c, long ldc, const ember_epilogue *ep)
{
    if (M <= 0 || p1 <= p0) return;
    ember_bsource src = { bp + p0 * K * EMBER_NR, NULL, 0, NULL, NULL, aoff };
    sweep(M, K, a, a_rs, 0, EMBER_MR * a_rs, &src, p0, p1, N, c, ldc, ep, 0, M);
}

long ember_gemm_chunk_panels(long K, long panels) { return chunk_panels(K, panels); }

void ember_gemm(long M, long N, long K, const float *a, long a_rs, long a_ks, long a_block,
                const float *bp, ember_packer pack, const void *pack_ctx, const float *b_direct, long ldb,
                const int32_t *koff, float *c, long ldc, const ember_epilogue *ep, float *scratch, int nthreads)
{
    if (M <= 0 || N <= 0) return; /* nothing to store (and no chunk to divide by) */
    /* An epilogue that does nothing: the tiles skip it. */
    if (ep && !ep->bias && !ep->residual && ep->act == EMBER_ACT_NONE && !ep->grid_w && !ep->transposed) ep = NULL;
    long panels = (N + EMBER_NR - 1) / EMBER_NR;
    long panel_floats = K * EMBER_NR;
    if (b_direct) {
        /* Full panels are read in place; only a partial last panel needs a packed copy,
         * unless rows come from an offset table over a padded buffer. */
        ember_bsource src = { NULL, b_direct, ldb, scratch, koff, NULL };
        if (!koff && N % EMBER_NR) ember_pack_panel(scratch, b_direct, ldb, K, N, (panels - 1) * EMBER_NR);
        long row_blocks = (M + EMBER_MR - 1) / EMBER_MR;
        /* Serial calls stay out of OpenMP: an inactive region still costs microseconds,
         * which small GEMMs (Winograd's, a GRU step's) would pay every call. */
        if (nthreads <= 1 || panels * row_blocks <= 1) {
            sweep_chunks(M, K, a, a_rs, a_ks, a_block, &src, 0, panels, N, c, ldc, ep, 0, M);
            return;
        }
        /* Each thread reads its own part of B: an equal run of panels against every row (all of
         * A) where A is no bigger than B, else a contiguous range of row blocks against every
         * panel (all of B), chunk by chunk either way (sweep_chunks). Threads taking
         * interleaved (chunk, row block) items instead would each stream all of B, from the
         * other core's cache where the previous step wrote it there. The runs are contiguous
         * and the same every call (the pool runs task t on the same thread where it can), so
         * thread t reads the pixels it wrote where the previous step split its pixels the same
         * way (a convolution's B is its input map). */
        if (panels >= nthreads && (M <= N || row_blocks < 2L * nthreads)) {
            #pragma omp parallel for num_threads(nthreads) schedule(static, 1)
            for (long t = 0; t < nthreads; t++) {
                long q0, q1;
                thread_panels(t, nthreads, panels, &q0, &q1);
                sweep_chunks(M, K, a, a_rs, a_ks, a_block, &src, q0, q1, N, c, ldc, ep, 0, M);
            }
            return;
        }
        #pragma omp parallel for num_threads(nthreads) schedule(static, 1)
        for (long t = 0; t < nthreads; t++) {
            long m0 = row_blocks * t / nthreads * EMBER_MR, m1 = row_blocks * (t + 1) / nthreads * EMBER_MR;
            sweep_chunks(M, K, a, a_rs, a_ks, a_block, &src, 0, panels, N, c, ldc, ep, m0, m1 < M ? m1 : M);
        }
        return;
    }
    long chunks = balanced_chunks(K, panels, nthreads);
    long biggest = (panels + chunks - 1) / chunks;
    long row_blocks = (M + EMBER_MR - 1) / EMBER_MR;
    if (chunks >= 2L * nthreads || row_blocks < 2L * nthreads || nthreads == 1) {
        /* Enough column work: each thread an equal run of panels, as where B is read in place,
         * packed and swept a chunk at a time in its own scratch. */
        if (nthreads <= 1 || chunks <= 1) {
            int rev = bp && M <= EMBER_MR && sweep_backwards(bp);
            for (long i = 0; i < chunks; i++) {
                long ch = rev ? chunks - 1 - i : i;
                chunk_sweep(M, N, K, a, a_rs, a_ks, a_block, bp, pack, pack_ctx, c, ldc, ep, scratch,
                            chunk_start(ch, chunks, panels), chunk_start(ch + 1, chunks, panels));
            }
            return;
        }
        #pragma omp parallel for num_threads(nthreads) schedule(static, 1)
        for (long t = 0; t < nthreads; t++) {
            long q0, q1;
            thread_panels(t, nthreads, panels, &q0, &q1);
            long pieces = (q1 - q0 + biggest - 1) / biggest;
            for (long i = 0; i < pieces; i++)
                chunk_sweep(M, N, K, a, a_rs, a_ks, a_block, bp, pack, pack_ctx, c, ldc, ep,
                            scratch + t * biggest * panel_floats, q0 + chunk_start(i, pieces, q1 - q0),
                            q0 + chunk_start(i + 1, pieces, q1 - q0));
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
    #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
    for (long rb = 0; rb < row_blocks; rb++)
        for (long ch = 0; ch < chunks; ch++) {
            long p0 = chunk_start(ch, chunks, panels), p1 = chunk_start(ch + 1, chunks, panels);
            long m0 = rb * EMBER_MR, m1 = m0 + EMBER_MR < M ? m0 + EMBER_MR : M;
            ember_bsource src = { all + p0 * panel_floats, NULL, 0, NULL, NULL, NULL };
            sweep(M, K, a, a_rs, a_ks, a_block, &src, p0, p1, N, c, ldc, ep, m0, m1);
        }
}

#endif
