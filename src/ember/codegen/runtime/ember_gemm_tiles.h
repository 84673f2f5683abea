/* The AVX-512 register tile of ember_gemm.c (the GEMM's micro-kernel: an mr x 32 block of C
 * in registers over the whole K, and its epilogue), and the row-block functions that sweep
 * it over panels, one per tile family and row count. Part of ember_gemm.c, included once
 * there (the driver, blocking and threads stay in the .c file); which parts a piece compiles
 * is ember_gemm.c's EMBER_GEMM_CORE / EMBER_GEMM_TILES. */
#ifndef EMBER_GEMM_TILES_H
#define EMBER_GEMM_TILES_H

#if !defined(EMBER_PORTABLE_TILE)
/* The AVX-512 tile: here ember_vn is ember_v16 (see ember_simd.h). */

/* Bias, residual and activation on one 16-wide vector of row `row`, columns [col, col + 16),
 * while it is still in registers. */
static inline __attribute__((always_inline)) ember_v16 finish(ember_v16 v, const ember_epilogue *ep, long row, long col)
{
    if (ep->bias) v += ep->bias_per_row ? vsplat(ep->bias[row]) : vload(ep->bias + col);
    if (ep->residual) v += vload(ep->residual + row * ep->ld_residual + col);
    switch (ep->act) {
    case EMBER_ACT_NONE: return v;
    case EMBER_ACT_RELU: return vn_max(vsplat(0.0f), v);
    case EMBER_ACT_CLIP: return vn_min(vsplat(ep->beta), vn_max(vsplat(ep->alpha), v));
    case EMBER_ACT_LEAKY_RELU: return vselect(v >= vsplat(0.0f), v, v * ep->alpha);
    case EMBER_ACT_HARD_SWISH:
        return ep->alpha * (v * vn_min(vsplat(1.0f), vn_max(vsplat(0.0f), v * (1.0f / 6.0f) + 0.5f))) + ep->beta;
    default: {
        float tmp[16];
        vstore(tmp, v);
        for (int j = 0; j < 16; j++) tmp[j] = ember_activate(tmp[j], ep);
        return vload(tmp);
    }
    }
}

/* Activations `finish` has no vector case for (Gelu, Sigmoid, Tanh, SiLU, HardSigmoid): a
 * case of its own there cost every other tile 10% (register allocation), and per-value calls
 * through ember_activate are 10x slower than a vector loop. */
static inline int activated_in_memory(int act)
{
    return act != EMBER_ACT_NONE && act != EMBER_ACT_RELU && act != EMBER_ACT_CLIP && act != EMBER_ACT_LEAKY_RELU
           && act != EMBER_ACT_HARD_SWISH;
}

/* Such an activation on one vector, out of line (the tiles' register allocation stays as
 * without it). */
EMBER_TILE_HELPER ember_v16 ember_tile_activate_v16(ember_v16 v, const ember_epilogue *ep);
#if EMBER_GEMM_CORE
EMBER_TILE_HELPER ember_v16 ember_tile_activate_v16(ember_v16 v, const ember_epilogue *ep)
{
    float tmp[16];
    vstore(tmp, v);
    ember_finish_span(tmp, NULL, 16, ep);
    return vload(tmp);
}
#endif

/* A grid tile's bias (per row) and activation, once per vector with the activation's case
 * chosen once per tile: per stored vector, as the runs below would, it cost the direct
 * convolution of MobileNetV2's first layer (K = 27) two thirds of its multiply-adds' time. */
static inline void finish_grid_tile(const ember_v16 (*acc)[2], int mr, const ember_epilogue *ep, long row0,
                                    ember_v16 (*out)[2])
{
    for (int i = 0; i < mr; i++) {
        ember_v16 b = vsplat(ep->bias ? ep->bias[row0 + i] : 0.0f);
        out[i][0] = acc[i][0] + b;
        out[i][1] = acc[i][1] + b;
    }
    ember_epilogue act = {0};
    act.alpha = ep->alpha;
    act.beta = ep->beta;
#define EMBER_GRID_ACT(ACT) \
    act.act = ACT; \
    for (int i = 0; i < mr; i++) { out[i][0] = finish(out[i][0], &act, 0, 0); out[i][1] = finish(out[i][1], &act, 0, 0); } \
    break;
    switch (ep->act) {
    case EMBER_ACT_NONE: break;
    case EMBER_ACT_RELU: EMBER_GRID_ACT(EMBER_ACT_RELU)
    case EMBER_ACT_CLIP: EMBER_GRID_ACT(EMBER_ACT_CLIP)
    case EMBER_ACT_LEAKY_RELU: EMBER_GRID_ACT(EMBER_ACT_LEAKY_RELU)
    case EMBER_ACT_HARD_SWISH: EMBER_GRID_ACT(EMBER_ACT_HARD_SWISH)
    default: ember_finish_span((float *)out, NULL, (long)mr * EMBER_NR, ep);
    }
#undef EMBER_GRID_ACT
}

/* The tile's rows onto the output grid: each run's kept columns are contiguous in C, so they
 * go out as masked vector stores, the residual coming in the same way. */
EMBER_TILE_HELPER void ember_tile_store_grid(const ember_v16 (*acc)[2], int mr, float *c, long ldc, int ncols,
                                             const ember_epilogue *ep, long row0, long col0);
#if EMBER_GEMM_CORE
EMBER_TILE_HELPER void ember_tile_store_grid(const ember_v16 (*acc)[2], int mr, float *c, long ldc, int ncols,
                                             const ember_epilogue *ep, long row0, long col0)
{
    float *row_base = c - col0;  /* C's columns are output positions from here on */
    /* Without a residual the tile is finished once, before the runs (finish_grid_tile); with
     * one, each stored vector adds its residual first, then bias and activation. */
    int finished = !ep->residual;
    ember_v16 out[EMBER_MR][2];
    if (finished) finish_grid_tile(acc, mr, ep, row0, out);
    ember_epilogue rest = *ep;
    rest.residual = NULL;
    int act_after = activated_in_memory(rest.act);  /* a vector loop below, not finish's per-value calls */
    if (act_after) rest.act = EMBER_ACT_NONE;
    int kept;
    long at;
    for (int s = 0, run; s < ncols; s += run) {
        run = grid_run(ep, col0, s, ncols, &kept, &at);
        for (int h = 0; h < 2 && kept > 0; h++) {
            int lo = s > 16 * h ? s - 16 * h : 0, hi = s + kept - 16 * h < 16 ? s + kept - 16 * h : 16;
            if (hi <= lo) continue;
            uint32_t mask = ((1u << hi) - 1u) & ~((1u << lo) - 1u);
            long lane0 = at - s + 16 * h;  /* where lane 0 of this half would go */
            for (int i = 0; i < mr; i++) {
                ember_v16 v;
                if (finished) {
                    v = out[i][h];
                } else {
                    v = acc[i][h] + vn_load_masked(ep->residual + (row0 + i) * ep->ld_residual + lane0, mask);
                    v = finish(v, &rest, row0 + i, lane0);
                    if (act_after) v = ember_tile_activate_v16(v, ep);
                }
                vn_store_masked(row_base + i * ldc + lane0, mask, v);
            }
        }
    }
}
#endif

/* The tile with such an activation, through memory: bias and residual added, then the
 * activation as one vector loop over the whole tile (mr x 32 independent values:
 * ember_finish_span), then stored. */
EMBER_TILE_HELPER void ember_tile_store_activated(const ember_v16 (*acc)[2], int mr, float *c, long ldc, int ncols,
                                                  const ember_epilogue *ep, long row0, long col0);
#if EMBER_GEMM_CORE
EMBER_TILE_HELPER void ember_tile_store_activated(const ember_v16 (*acc)[2], int mr, float *c, long ldc, int ncols,
                                                  const ember_epilogue *ep, long row0, long col0)
{
    float out[EMBER_MR][EMBER_NR];
    for (int i = 0; i < mr; i++) {
        vstore(out[i], acc[i][0]);
        vstore(out[i] + 16, acc[i][1]);
        if (ep->bias) {
            if (ep->bias_per_row) for (int j = 0; j < EMBER_NR; j++) out[i][j] += ep->bias[row0 + i];
            else for (int j = 0; j < ncols; j++) out[i][j] += ep->bias[col0 + j];
        }
        if (ep->residual) {
            const float *r = ep->residual + (row0 + i) * ep->ld_residual + col0;
            for (int j = 0; j < ncols; j++) out[i][j] += r[j];
        }
    }
    ember_finish_span(&out[0][0], NULL, (long)mr * EMBER_NR, ep);
    for (int i = 0; i < mr; i++) memcpy(c + i * ldc, out[i], (size_t)ncols * sizeof(float));
}
#endif

/* `finish` on a whole full-width tile in registers, each step's case chosen once per tile
 * rather than once per vector (the same operations on each value, in the same order): per
 * vector, every row-count instantiation carried sixteen copies of the activation switch,
 * most of its code and of gcc's time on it. */
static inline __attribute__((always_inline)) void finish_tile(ember_v16 (*acc)[2], int mr, const ember_epilogue *ep,
                                                              long row0, long col0)
{
    if (ep->bias && ep->bias_per_row) {
        #pragma GCC unroll 8
        for (int i = 0; i < EMBER_MR; i++)
            if (i < mr) { ember_v16 b = vsplat(ep->bias[row0 + i]); acc[i][0] += b; acc[i][1] += b; }
    } else if (ep->bias) {
        ember_v16 b0 = vload(ep->bias + col0), b1 = vload(ep->bias + col0 + 16);
        #pragma GCC unroll 8
        for (int i = 0; i < EMBER_MR; i++)
            if (i < mr) { acc[i][0] += b0; acc[i][1] += b1; }
    }
    if (ep->residual) {
        #pragma GCC unroll 8
        for (int i = 0; i < EMBER_MR; i++) {
            if (i < mr) {
                const float *res = ep->residual + (row0 + i) * ep->ld_residual + col0;
                acc[i][0] += vload(res);
                acc[i][1] += vload(res + 16);
            }
        }
    }
    ember_epilogue act = {0};
    act.alpha = ep->alpha;
    act.beta = ep->beta;
#define EMBER_TILE_ACT(ACT) \
    act.act = ACT; \
    _Pragma("GCC unroll 8") \
    for (int i = 0; i < EMBER_MR; i++) \
        if (i < mr) { acc[i][0] = finish(acc[i][0], &act, 0, 0); acc[i][1] = finish(acc[i][1], &act, 0, 0); } \
    break;
    switch (ep->act) {
    case EMBER_ACT_NONE: break;
    case EMBER_ACT_RELU: EMBER_TILE_ACT(EMBER_ACT_RELU)
    case EMBER_ACT_CLIP: EMBER_TILE_ACT(EMBER_ACT_CLIP)
    case EMBER_ACT_LEAKY_RELU: EMBER_TILE_ACT(EMBER_ACT_LEAKY_RELU)
    case EMBER_ACT_HARD_SWISH: EMBER_TILE_ACT(EMBER_ACT_HARD_SWISH)
    default:
        #pragma GCC unroll 8
        for (int i = 0; i < EMBER_MR; i++)
            if (i < mr) { acc[i][0] = ember_tile_activate_v16(acc[i][0], ep); acc[i][1] = ember_tile_activate_v16(acc[i][1], ep); }
    }
#undef EMBER_TILE_ACT
}

/* One k step of an mr x 32 tile: B's row k (through the offset table where there is one)
 * times A's column k, added into `acc`. */
static inline __attribute__((always_inline)) void tile_step(
    int mr, int halves, long k, const float *a, long a_rs, long a_ks, const int32_t *aoff, const float *bp, long b_ks,
    const int32_t *koff, ember_v16 (*acc)[2])
{
    const float *bk = koff ? bp + koff[k] : bp + k * b_ks;
    ember_v16 b0 = vload(bk);
    ember_v16 b1 = halves == 2 ? vload(bk + 16) : vsplat(0.0f);
    #pragma GCC unroll 8
    for (int i = 0; i < EMBER_MR; i++) {
        if (i < mr) {
            float ai = aoff ? a[i * a_rs + aoff[k]] : a[i * a_rs + k * a_ks];
            acc[i][0] += ai * b0;
            if (halves == 2) acc[i][1] += ai * b1;
        }
    }
}

/* One mr x 32 tile over the full K; `mr` is a constant in each instantiation below, and so
 * is `halves`: 1 for a last panel of at most 16 columns (a classifier's N = 10, N % 32 <= 16),
 * which then does half the multiply-adds, the second half staying zero. */
static inline __attribute__((always_inline)) void tile(
    int mr, int halves, long kc, const float *a, long a_rs, long a_ks, const int32_t *aoff, const float *bp, long b_ks,
    const int32_t *koff, float *c, long ldc, int ncols, const ember_epilogue *ep, long row0, long col0)
{
    ember_v16 acc[EMBER_MR][2];
    for (int i = 0; i < EMBER_MR; i++) { acc[i][0] = vsplat(0.0f); acc[i][1] = vsplat(0.0f); }
    long k = 0;
    if (mr <= 2) {
        /* One or two rows (a GEMV) leave too few accumulators to cover the FMA latency:
         * split k four ways into independent partial sums and add them at the end. */
        ember_v16 part[2][2][4];
        for (int i = 0; i < 2; i++)
            for (int h = 0; h < 2; h++)
                for (int s = 0; s < 4; s++) part[i][h][s] = vsplat(0.0f);
        for (; k + 4 <= kc; k += 4) {
            #pragma GCC unroll 4
            for (int s = 0; s < 4; s++) {
                const float *bk = koff ? bp + koff[k + s] : bp + (k + s) * b_ks;
                ember_v16 b0 = vload(bk), b1 = halves == 2 ? vload(bk + 16) : vsplat(0.0f);
                #pragma GCC unroll 2
                for (int i = 0; i < 2; i++) {
                    if (i < mr) {
                        float ai = aoff ? a[i * a_rs + aoff[k + s]] : a[i * a_rs + (k + s) * a_ks];
                        part[i][0][s] += ai * b0;
                        if (halves == 2) part[i][1][s] += ai * b1;
                    }
                }
            }
        }
        for (int i = 0; i < 2 && i < mr; i++)
            for (int h = 0; h < 2; h++)
                acc[i][h] = (part[i][h][0] + part[i][h][1]) + (part[i][h][2] + part[i][h][3]);
    }
    if (mr > 2) {
        /* Four k steps per loop iteration: 8% faster on a 1024^3 GEMM and 4-7% on ResNet-18,
         * BERT and MobileNetV2 on a Xeon (AVX-512), where one step a loop iteration left the
         * FMA ports idle a fifth of the time with B streaming from L2. The GEMV tiles (the
         * remainder of the four-way split above: at most 3 steps) keep the plain loop. */
        #pragma GCC unroll 4
        for (; k < kc; k++) tile_step(mr, halves, k, a, a_rs, a_ks, aoff, bp, b_ks, koff, acc);
    } else {
        for (; k < kc; k++) tile_step(mr, halves, k, a, a_rs, a_ks, aoff, bp, b_ks, koff, acc);
    }
    if (ep && (ep->grid_w || (activated_in_memory(ep->act) && !ep->transposed))) {
        /* A copy goes out to memory, so that `acc` itself never has its address taken and
         * stays in registers from the zeroing to the stores. */
        ember_v16 held[EMBER_MR][2];
        #pragma GCC unroll 8
        for (int i = 0; i < EMBER_MR; i++)
            if (i < mr) { held[i][0] = acc[i][0]; held[i][1] = acc[i][1]; }
        if (ep->grid_w) ember_tile_store_grid((const ember_v16 (*)[2])held, mr, c, ldc, ncols, ep, row0, col0);
        else ember_tile_store_activated((const ember_v16 (*)[2])held, mr, c, ldc, ncols, ep, row0, col0);
        return;
    }
    if (ncols == EMBER_NR && !(ep && ep->transposed)) {
        if (ep) finish_tile(acc, mr, ep, row0, col0);
        #pragma GCC unroll 8
        for (int i = 0; i < EMBER_MR; i++) {
            if (i < mr) { vstore(c + i * ldc, acc[i][0]); vstore(c + i * ldc + 16, acc[i][1]); }
        }
        return;
    }
    float out[EMBER_MR][EMBER_NR];
    for (int i = 0; i < mr; i++) {
        vstore(out[i], acc[i][0]);
        vstore(out[i] + 16, acc[i][1]);
    }
    ember_tile_store_rows(out, mr, c, ldc, ncols, ep, row0, col0);
}

/* The half-width tiles (a last panel of at most 16 columns), one function per row count: out of
 * line, since inlined beside the full ones they cost those a register (gcc then spilled A's row
 * offsets, 5% slower). */
#define EMBER_HALF_PARAMS \
    long kc, const float *a, long a_rs, long a_ks, const float *bp, long b_ks, float *c, long ldc, int ncols, \
    const ember_epilogue *ep, long row0, long col0
#define EMBER_HALF_TILE(MR) \
    EMBER_TILE_LINKAGE __attribute__((noipa)) void ember_tile_half_##MR(EMBER_HALF_PARAMS) \
    { tile(MR, 1, kc, a, a_rs, a_ks, (const int32_t *)0, bp, b_ks, (const int32_t *)0, c, ldc, ncols, ep, row0, col0); }
EMBER_TILE_LINKAGE void ember_tile_half_1(EMBER_HALF_PARAMS), ember_tile_half_2(EMBER_HALF_PARAMS),
    ember_tile_half_3(EMBER_HALF_PARAMS), ember_tile_half_4(EMBER_HALF_PARAMS), ember_tile_half_5(EMBER_HALF_PARAMS),
    ember_tile_half_6(EMBER_HALF_PARAMS), ember_tile_half_7(EMBER_HALF_PARAMS), ember_tile_half_8(EMBER_HALF_PARAMS);
#if EMBER_GEMM_TILES(EMBER_TILES_HALF)
EMBER_HALF_TILE(1) EMBER_HALF_TILE(2) EMBER_HALF_TILE(3) EMBER_HALF_TILE(4)
EMBER_HALF_TILE(5) EMBER_HALF_TILE(6) EMBER_HALF_TILE(7) EMBER_HALF_TILE(8)
#endif

/* The tiles of one block of mr rows of A (at `ab`; mr a constant) against panels [p0, p1) of
 * B: the inner loop of the sweep, in a function per row count, so the per-tile cost is a loop
 * step, not a call. `offsets`: 1 where B's rows come from the offset table (the direct
 * convolution's; its narrow last panels are rare and take the full-width tile), 2 where A's
 * columns do (ember_gemm_taps; B packed, full-width tiles too). */
static inline __attribute__((always_inline)) void row_block(int mr, int offsets, EMBER_ROWS_PARAMS)
{
    for (long p = p0; p < p1; p++) {
        long col0 = p * EMBER_NR;
        int ncols = N - col0 < EMBER_NR ? (int)(N - col0) : EMBER_NR;
        float *ct = ep && ep->transposed ? c + col0 * ldc + r : c + r * ldc + col0;
        if (offsets == 1) {
            tile(mr, 2, K, ab, a_rs, a_ks, (const int32_t *)0, b->direct + col0, 0, b->koff, ct, ldc, ncols, ep, r,
                 col0);
            continue;
        }
        if (offsets == 2) {
            tile(mr, 2, K, ab, a_rs, 0, b->aoff, b->panels + (p - p0) * K * EMBER_NR, EMBER_NR, (const int32_t *)0,
                 ct, ldc, ncols, ep, r, col0);
            continue;
        }
        const float *bp;
        long b_ks;
        if (b->panels) { bp = b->panels + (p - p0) * K * EMBER_NR; b_ks = EMBER_NR; }
        else if (ncols == EMBER_NR) { bp = b->direct + col0; b_ks = b->ldb; }
        else { bp = b->tail; b_ks = EMBER_NR; }
        if (ncols > EMBER_NR / 2) {
            tile(mr, 2, K, ab, a_rs, a_ks, (const int32_t *)0, bp, b_ks, (const int32_t *)0, ct, ldc, ncols, ep, r,
                 col0);
            continue;
        }
        switch (mr) {  /* mr is a constant: one call remains */
        case 8: ember_tile_half_8(K, ab, a_rs, a_ks, bp, b_ks, ct, ldc, ncols, ep, r, col0); break;
        case 7: ember_tile_half_7(K, ab, a_rs, a_ks, bp, b_ks, ct, ldc, ncols, ep, r, col0); break;
        case 6: ember_tile_half_6(K, ab, a_rs, a_ks, bp, b_ks, ct, ldc, ncols, ep, r, col0); break;
        case 5: ember_tile_half_5(K, ab, a_rs, a_ks, bp, b_ks, ct, ldc, ncols, ep, r, col0); break;
        case 4: ember_tile_half_4(K, ab, a_rs, a_ks, bp, b_ks, ct, ldc, ncols, ep, r, col0); break;
        case 3: ember_tile_half_3(K, ab, a_rs, a_ks, bp, b_ks, ct, ldc, ncols, ep, r, col0); break;
        case 2: ember_tile_half_2(K, ab, a_rs, a_ks, bp, b_ks, ct, ldc, ncols, ep, r, col0); break;
        default: ember_tile_half_1(K, ab, a_rs, a_ks, bp, b_ks, ct, ldc, ncols, ep, r, col0); break;
        }
    }
}

#define EMBER_ROWS(FAMILY, MR, OFFSETS) \
    EMBER_TILE_LINKAGE __attribute__((noipa)) void ember_rows_##FAMILY##_##MR(EMBER_ROWS_PARAMS) \
    { row_block(MR, OFFSETS, K, ab, a_rs, a_ks, b, p0, p1, N, c, ldc, ep, r); }
#define EMBER_ROWS_FAMILY(FAMILY, OFFSETS) \
    EMBER_ROWS(FAMILY, 1, OFFSETS) EMBER_ROWS(FAMILY, 2, OFFSETS) EMBER_ROWS(FAMILY, 3, OFFSETS) \
    EMBER_ROWS(FAMILY, 4, OFFSETS) EMBER_ROWS(FAMILY, 5, OFFSETS) EMBER_ROWS(FAMILY, 6, OFFSETS) \
    EMBER_ROWS(FAMILY, 7, OFFSETS) EMBER_ROWS(FAMILY, 8, OFFSETS)
#if EMBER_GEMM_TILES(EMBER_TILES_FULL)
EMBER_ROWS_FAMILY(plain, 0)
#endif
#if EMBER_GEMM_TILES(EMBER_TILES_OFFSETS)
EMBER_ROWS_FAMILY(offsets, 1)
#endif
#if EMBER_GEMM_TILES(EMBER_TILES_TAPS)
EMBER_ROWS_FAMILY(taps, 2)
#endif

#endif

#endif
