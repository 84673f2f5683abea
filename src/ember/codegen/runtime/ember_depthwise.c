/* Depthwise convolution (one filter per channel), NCHW, channels spread over threads.
 * See ember_gemm.h.
 *
 * Without dilation and with strides of 1 or 2 along each axis, each output row is computed L
 * outputs at a time straight from the input: tap (u, v) of outputs (i, j..j+L-1) reads input
 * row i * SH - PH + u at columns (j + l) * SW - PW + v, one vector load (SW = 1) or two loads
 * and an even-lane shuffle (SW = 2). Rows that fall in the padding are skipped; vectors that
 * touch the left or right padding load a window with the out-of-range lanes zeroed (a masked
 * load on AVX-512). Every vector accumulates all taps in registers and is stored once with
 * the bias and activation applied, so the input is read once and the output written once,
 * with no padded copy.
 * L is the machine's vector width (ember_vn, see ember_simd.h): small maps waste fewer lanes.
 *
 * Maps narrower than that (MobileNetV2's 7x7 and 14x14 -> 7x7 layers) waste most lanes of a
 * row vector, so on AVX-512 they go 16 channels at a time instead (dw_blocked): the block is
 * transposed in 16 x 16 register blocks into a zero-padded [rows][columns][16 channels]
 * scratch, each output pixel is one vector of 16 channels accumulating its taps from
 * sequential vectors with no bounds checks, and the [pixels][16] result is transposed back
 * into the block's NCHW planes. */
#include "ember_gemm.h"
#include "ember_math.h"
#include "ember_simd.h"

/* The cpu backend compiles this file in pieces, in parallel, defining EMBER_DEPTHWISE_PIECE: 0
 * for everything but the kernels specialised to a tap size and stride pair, or one family of
 * those (DW_KERNELS_*). Whole, gcc took 7.2 s on this file, the longest piece of the library;
 * and a model links only the families whose kernels its C names (the caller passes the kernel,
 * runtime_files.OPTIONAL_PIECES): MobileNetV2 needs the 3x3 family alone. Without it (bundles,
 * tests) the file is whole. As in ember_gemm.c, every piece compiles the same code as the
 * whole file: the kernels crossing pieces are `noipa`. */
#ifdef EMBER_DEPTHWISE_PIECE
#define DW_CORE (EMBER_DEPTHWISE_PIECE == 0)
#define DW_KERNELS(family) (EMBER_DEPTHWISE_PIECE == (family))
#else
#define DW_CORE 1
#define DW_KERNELS(family) 1
#endif
#define DW_KERNELS_3X3 1       /* 3x3 taps, every stride pair */
#define DW_KERNELS_5X5_EQUAL 2 /* 5x5 taps, strides 1x1 and 2x2 */
#define DW_KERNELS_5X5_MIXED 3 /* 5x5 taps, strides 2x1 and 1x2 */
#define DW_KERNELS_ANY_EQUAL 4 /* other sizes (unrolled at run time's sizes: the slowest), 1x1 and 2x2 */
#define DW_KERNELS_ANY_MIXED 5 /* other sizes, 2x1 and 1x2 */

#define DW_L EMBER_VN_LANES

/* Which lanes l of an L-float window at row[start] lie inside a row of n floats. */
static inline uint32_t dw_window_mask(long start, long n)
{
    long lo = start < 0 ? -start : 0, hi = n - start < DW_L ? n - start : DW_L;
    if (hi <= lo) return 0;
    return ((1u << hi) - 1u) & ~((1u << lo) - 1u);
}

static inline ember_vn dw_even_lanes(ember_vn lo, ember_vn hi)
{
#if DW_L == 16
    const ember_vni even = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
#elif DW_L == 8
    const ember_vni even = {0, 2, 4, 6, 8, 10, 12, 14};
#else
    const ember_vni even = {0, 2, 4, 6};
#endif
#ifdef __clang__
    ember_vn out;
    for (int l = 0; l < DW_L; l++) out[l] = even[l] < DW_L ? lo[even[l]] : hi[even[l] - DW_L];
    return out;
#else
    return __builtin_shuffle(lo, hi, even);
#endif
}

#if DW_CORE
static int dw_direct(const ember_conv_geom *g)
{
    return (g->SH == 1 || g->SH == 2) && (g->SW == 1 || g->SW == 2) && g->DH == 1 && g->DW == 1 && g->KH <= 8 &&
           g->KW <= 8;
}

#if DW_L == 16
#define DW_BLOCK 16
/* Output rows at most this wide take the channel-blocked path (see the top of this file), if
 * its padded input (16 floats a pixel) stays within DW_BLOCKED_MAX_PIXELS. */
#define DW_BLOCKED_MAX_OW 8
#define DW_BLOCKED_MAX_PIXELS 4096
#endif

/* The padded input the blocked path reads: every row and column a tap reaches. */
static long dw_padded_rows(const ember_conv_geom *g) { return (g->OH - 1) * g->SH + (g->KH - 1) * g->DH + 1; }
static long dw_padded_cols(const ember_conv_geom *g) { return (g->OW - 1) * g->SW + (g->KW - 1) * g->DW + 1; }

static int dw_blocked(const ember_conv_geom *g)
{
#ifdef DW_BLOCK
    return g->OW <= DW_BLOCKED_MAX_OW && g->KH * g->KW <= 64 &&
           dw_padded_rows(g) * dw_padded_cols(g) <= DW_BLOCKED_MAX_PIXELS;
#else
    (void)g;
    return 0;
#endif
}

/* Floats of one thread's blocked scratch: the padded input and the output pixels, 16
 * channels each. */
static long dw_blocked_floats(const ember_conv_geom *g)
{
    return (dw_padded_rows(g) * dw_padded_cols(g) + g->OH * g->OW) * 16;
}

/* Scratch only where the blocked path runs: one blocked scratch per thread. */
long ember_depthwise_scratch_bytes(const ember_conv_geom *g, int nthreads)
{
    if (dw_blocked(g)) return dw_blocked_floats(g) * (nthreads > 1 ? nthreads : 1) * (long)sizeof(float);
    return 0;
}

#endif

/* Whether the activation runs in registers (then no residual may come before it). */
static inline int dw_act_in_register(const ember_epilogue *ep, const float *residual)
{
    return !residual && (ep->act == EMBER_ACT_NONE || ep->act == EMBER_ACT_RELU || ep->act == EMBER_ACT_CLIP ||
                         ep->act == EMBER_ACT_HARD_SWISH);
}

static inline void dw_store(float *yr, long j, long ow, ember_vn v)
{
    if (j + DW_L <= ow) vn_store(yr + j, v);
    else vn_store_masked(yr + j, (1u << (ow - j)) - 1u, v);
}

/* The L inputs one tap (u, v) reads for outputs j..j+L-1, from `from` = row + j*SW - PW + v:
 * one vector (SW = 1) or the even lanes of two (SW = 2); `masks` (the tap's pair, one per
 * L-float half) zeroes the lanes outside the row, NULL where all lie inside. */
static inline __attribute__((always_inline)) ember_vn dw_tap(const float *from, const long SW, const uint32_t *masks)
{
    if (SW == 1) return masks ? vn_load_masked(from, masks[0]) : vn_load(from);
    if (masks) return dw_even_lanes(vn_load_masked(from, masks[0]), vn_load_masked(from + DW_L, masks[1]));
    return dw_even_lanes(vn_load(from), vn_load(from + DW_L));
}

/* The taps of outputs (i, j..j+L-1) from row pointers (NULL: a row in the padding, skipped);
 * `masks` (KW pairs, one per L-float half) is NULL where every read lies inside the row. */
static inline __attribute__((always_inline)) ember_vn
dw_vector(const float *const *rows, const ember_vn *wt, const long KH, const long KW, const long SW, long start,
          const uint32_t *masks, ember_vn sum)
{
    /* One accumulator per kernel row (up to three) shortens the chain of dependent
     * multiply-adds, which otherwise bounds the speed. */
    ember_vn acc1 = vn_splat(0.0f), acc2 = vn_splat(0.0f);
    #pragma GCC unroll 8
    for (long u = 0; u < KH; u++) {
        const float *row = rows[u];
        if (!row) continue;
        #pragma GCC unroll 8
        for (long v = 0; v < KW; v++) {
            ember_vn in = dw_tap(row + start + v, SW, masks ? masks + 2 * v : NULL);
            if (u % 3 == 1) acc1 += wt[u * KW + v] * in;
            else if (u % 3 == 2) acc2 += wt[u * KW + v] * in;
            else sum += wt[u * KW + v] * in;
        }
    }
    return sum + (acc1 + acc2);
}

static inline void dw_rows(const ember_conv_geom *g, const float *xc, long i, long KH, long SH,
                           const float **rows)
{
    for (long u = 0; u < KH; u++) {
        long ih = i * SH - g->PH + u;
        rows[u] = ih >= 0 && ih < g->H ? xc + ih * g->W : NULL;
    }
}

/* DW_ROWS output rows at a time: each input row vector loaded once feeds every one of them
 * whose taps reach it (three of four rows at stride 1 with a 3x3 kernel), which takes the
 * loads off the critical path; two accumulators per output row (even and odd tap columns):
 * with one, the rows' chains of multiply-adds bounded the speed on short maps (a 480-channel
 * 3x40 map with 5x5 taps, three rows a block: 63 -> 48 us; Xeon). Rows in the padding are
 * skipped (NULL), not read as zeros. */
#define DW_ROWS 4

static inline __attribute__((always_inline)) void
dw_vector_rows(const float *const *rows, const ember_vn *wt, const long KH, const long KW, const long SH,
               const long SW, const int R, long start, const uint32_t *masks, ember_vn bias, ember_vn *acc)
{
    ember_vn odd[DW_ROWS];
    for (int r = 0; r < R; r++) {
        acc[r] = bias;
        odd[r] = vn_splat(0.0f);
    }
    #pragma GCC unroll 16
    for (long t = 0; t < SH * (R - 1) + KH; t++) {
        const float *row = rows[t];
        if (!row) continue;
        #pragma GCC unroll 8
        for (long v = 0; v < KW; v++) {
            ember_vn in = dw_tap(row + start + v, SW, masks ? masks + 2 * v : NULL);
            #pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                long u = t - SH * r;
                if (u >= 0 && u < KH) {
                    if (v % 2) odd[r] += wt[u * KW + v] * in;
                    else acc[r] += wt[u * KW + v] * in;
                }
            }
        }
    }
    for (int r = 0; r < R; r++) acc[r] += odd[r];
}

/* Output rows [i, i + R) (R <= DW_ROWS, a constant) at columns [j, j + L) for every j in
 * [j0, j1) (step L). */
static inline __attribute__((always_inline)) void
dw_row_block(const ember_conv_geom *g, const long KH, const long KW, const long SH, const long SW, const int R,
             const float *xc, long i, long j0, long j1, const uint32_t *masks, const ember_vn *wt,
             ember_vn bias, int act, ember_vn lo, ember_vn hi, float *yc)
{
    const float *rows[SH * (DW_ROWS - 1) + 8];
    for (long t = 0; t < SH * (R - 1) + KH; t++) {
        long ih = i * SH - g->PH + t;
        rows[t] = ih >= 0 && ih < g->H ? xc + ih * g->W : NULL;
    }
    for (long j = j0; j < j1; j += DW_L) {
        ember_vn acc[DW_ROWS];
        dw_vector_rows(rows, wt, KH, KW, SH, SW, R, j * SW - g->PW, masks, bias, acc);
        for (int r = 0; r < R; r++) {
            float *yr = yc + (i + r) * g->OW;
            if (masks) dw_store(yr, j, g->OW, vn_activate(acc[r], act, lo, hi));
            else vn_store(yr + j, vn_activate(acc[r], act, lo, hi));
        }
    }
}

/* The rows after the last whole block of DW_ROWS: two or three as a block of their own (each
 * input vector then feeds two or three outputs; row by row, a 6-row map's last two rows took
 * as long as its first four), a single one row by row. */
static inline __attribute__((always_inline)) void
dw_tail_rows(const ember_conv_geom *g, const long KH, const long KW, const long SH, const long SW, const float *xc,
             long i, long j0, long j1, const uint32_t *masks, const ember_vn *wt, ember_vn bias,
             int act, ember_vn lo, ember_vn hi, float *yc)
{
    long left = g->OH - i;
    if (left == 3) dw_row_block(g, KH, KW, SH, SW, 3, xc, i, j0, j1, masks, wt, bias, act, lo, hi, yc);
    else if (left == 2) dw_row_block(g, KH, KW, SH, SW, 2, xc, i, j0, j1, masks, wt, bias, act, lo, hi, yc);
    else if (left == 1) {
        const float *rows[8];
        dw_rows(g, xc, i, KH, SH, rows);
        float *yr = yc + i * g->OW;
        for (long j = j0; j < j1; j += DW_L) {
            ember_vn v = vn_activate(dw_vector(rows, wt, KH, KW, SW, j * SW - g->PW, masks, bias), act, lo, hi);
            if (masks) dw_store(yr, j, g->OW, v);
            else vn_store(yr + j, v);
        }
    }
}

/* The column vectors of an output row: those in [j_in, j_out) read only inside the input row;
 * the others (at most DW_MASKED_COLUMNS, else the general path runs) take masked windows,
 * whose masks depend on the column alone, so they are computed once a call. */
#define DW_MASKED_COLUMNS 8
typedef struct ember_dw_columns {
    long j_in, j_out;
    int masked;
    long j[DW_MASKED_COLUMNS];
    uint32_t masks[DW_MASKED_COLUMNS][16]; /* KW pairs, one mask per L-float half */
} dw_columns;

#if DW_CORE
/* Fills `c`; 0 where more columns need masks than it holds. */
static int dw_plan_columns(const ember_conv_geom *g, dw_columns *c)
{
    long W = g->W, PW = g->PW, OW = g->OW, SW = g->SW, KW = g->KW;
    long j_in = (PW + SW - 1) / SW;
    j_in = (j_in + DW_L - 1) / DW_L * DW_L;
    if (j_in > OW) j_in = (OW + DW_L - 1) / DW_L * DW_L;
    long j_out = j_in;
    while (j_out + DW_L <= OW && j_out * SW - PW + DW_L * SW - 1 + KW <= W) j_out += DW_L;
    c->j_in = j_in;
    c->j_out = j_out;
    c->masked = 0;
    for (long j = 0; j < OW; j += DW_L) {
        if (j == j_in) j = j_out;
        if (j >= OW) break;
        if (c->masked == DW_MASKED_COLUMNS) return 0;
        for (long v = 0; v < KW; v++) {
            c->masks[c->masked][2 * v] = dw_window_mask(j * SW - PW + v, W);
            c->masks[c->masked][2 * v + 1] = dw_window_mask(j * SW - PW + v + DW_L, W);
        }
        c->j[c->masked++] = j;
    }
    return 1;
}
#endif

/* One channel, straight from the input (see the top of this file). KH, KW, SH, SW are passed
 * as constants by the callers that specialize on them, so the tap loops unroll. */
static inline __attribute__((always_inline)) void
dw_channel_direct(const ember_conv_geom *g, const long KH, const long KW, const long SH, const long SW,
                  const float *xc, const float *wc, float b0, float *yc, const float *rc, const ember_epilogue *ep,
                  const dw_columns *cols)
{
    ember_vn wt[64];
    for (long t = 0; t < KH * KW; t++) wt[t] = vn_splat(wc[t]);
    int in_reg = dw_act_in_register(ep, rc);
    int act = in_reg ? ep->act : EMBER_ACT_NONE;
    ember_vn lo = vn_act_low(ep->act, ep->alpha), hi = vn_splat(ep->beta);
    ember_vn bias = vn_splat(b0);
    long blocked_rows = g->OH / DW_ROWS * DW_ROWS;
    for (int k = 0; k < cols->masked; k++) {
        long j = cols->j[k];
        const uint32_t *masks = cols->masks[k];
        for (long i = 0; i < blocked_rows; i += DW_ROWS)
            dw_row_block(g, KH, KW, SH, SW, DW_ROWS, xc, i, j, j + DW_L, masks, wt, bias, act, lo, hi, yc);
        dw_tail_rows(g, KH, KW, SH, SW, xc, blocked_rows, j, j + DW_L, masks, wt, bias, act, lo, hi, yc);
    }
    if (cols->j_out > cols->j_in) {
        for (long i = 0; i < blocked_rows; i += DW_ROWS)
            dw_row_block(g, KH, KW, SH, SW, DW_ROWS, xc, i, cols->j_in, cols->j_out, NULL, wt, bias, act, lo, hi,
                         yc);
        dw_tail_rows(g, KH, KW, SH, SW, xc, blocked_rows, cols->j_in, cols->j_out, NULL, wt, bias, act, lo, hi, yc);
    }
    if (!in_reg) ember_finish_span(yc, rc, g->OH * g->OW, ep);
}

#if DW_CORE
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
        ember_finish_span(yr, rc ? rc + i * g->OW : NULL, g->OW, ep);
    }
}
#endif

/* One out-of-line copy of dw_channel_direct per specialisation, so that each is compiled
 * and laid out on its own (inlined into one dispatcher, adding the unequal strides slowed the
 * 5x5 stride-1 copy by 20%). They are the library's functions (declared in ember_gemm.h), not
 * exported from a model's library: the model passes the one its geometry takes. */
#define DW_SPECIALISED(name, kh, kw, sh, sw) \
    __attribute__((visibility("hidden"), noinline, noipa)) void name(EMBER_DW_KERNEL_PARAMS) \
    { dw_channel_direct(g, kh, kw, sh, sw, xc, wc, b0, yc, rc, ep, cols); }
#if DW_KERNELS(DW_KERNELS_3X3)
DW_SPECIALISED(ember_dw_3x3_s11, 3, 3, 1, 1)
DW_SPECIALISED(ember_dw_3x3_s22, 3, 3, 2, 2)
DW_SPECIALISED(ember_dw_3x3_s21, 3, 3, 2, 1)
DW_SPECIALISED(ember_dw_3x3_s12, 3, 3, 1, 2)
#endif
#if DW_KERNELS(DW_KERNELS_5X5_EQUAL)
DW_SPECIALISED(ember_dw_5x5_s11, 5, 5, 1, 1)
DW_SPECIALISED(ember_dw_5x5_s22, 5, 5, 2, 2)
#endif
#if DW_KERNELS(DW_KERNELS_5X5_MIXED)
DW_SPECIALISED(ember_dw_5x5_s21, 5, 5, 2, 1)
DW_SPECIALISED(ember_dw_5x5_s12, 5, 5, 1, 2)
#endif
#if DW_KERNELS(DW_KERNELS_ANY_EQUAL)
DW_SPECIALISED(ember_dw_any_s11, g->KH, g->KW, 1, 1)
DW_SPECIALISED(ember_dw_any_s22, g->KH, g->KW, 2, 2)
#endif
#if DW_KERNELS(DW_KERNELS_ANY_MIXED)
DW_SPECIALISED(ember_dw_any_s21, g->KH, g->KW, 2, 1)
DW_SPECIALISED(ember_dw_any_s12, g->KH, g->KW, 1, 2)
#endif

#if DW_CORE
#ifdef DW_BLOCK

/* Channels [0, nch) of x (planes of H x W) into pad[(PH + h) * Wp + PW + w][16]. */
static void dw_block_in(const ember_conv_geom *g, const float *x, int nch, float *pad, long Wp, long Hp)
{
    long hw = g->H * g->W, h = 0, w = 0;
    for (long j = 0; j < hw; j += 16) {
        int n = hw - j < 16 ? (int)(hw - j) : 16;
        uint32_t mask = n == 16 ? 0xFFFFu : (1u << n) - 1u;
        ember_vn r[16];
        for (int q = 0; q < 16; q++) r[q] = q < nch ? vn_load_masked(x + q * hw + j, mask) : vn_splat(0.0f);
        ember_transpose16(r);
        for (int q = 0; q < n; q++) {
            if (g->PH + h < Hp && g->PW + w < Wp) vn_store(pad + ((g->PH + h) * Wp + g->PW + w) * 16, r[q]);
            if (++w == g->W) { w = 0; h++; }
        }
    }
}

/* out[p][16] (p < OH * OW) into channels [0, nch) of y (planes of OH x OW). */
static void dw_block_out(const ember_conv_geom *g, const float *out, int nch, float *y)
{
    long plane = g->OH * g->OW;
    for (long j = 0; j < plane; j += 16) {
        int n = plane - j < 16 ? (int)(plane - j) : 16;
        uint32_t mask = n == 16 ? 0xFFFFu : (1u << n) - 1u;
        ember_vn r[16];
        for (int q = 0; q < 16; q++) r[q] = q < n ? vn_load(out + (j + q) * 16) : vn_splat(0.0f);
        ember_transpose16(r);
        for (int q = 0; q < nch; q++) vn_store_masked(y + q * plane + j, mask, r[q]);
    }
}

/* Every output pixel of the block from the padded input; KH, KW, S constant where the
 * caller specializes. */
static inline __attribute__((always_inline)) void
dw_block_pixels(const ember_conv_geom *g, const long KH, const long KW, const long S, const float *pad, long Wp,
                const ember_vn *wt, ember_vn bias, int act, ember_vn lo, ember_vn hi, float *out)
{
    long DH = S ? 1 : g->DH, DW = S ? 1 : g->DW, SH = S ? S : g->SH, SW = S ? S : g->SW;
    for (long i = 0; i < g->OH; i++)
        for (long j = 0; j < g->OW; j++) {
            const float *base = pad + (i * SH * Wp + j * SW) * 16;
            ember_vn acc0 = bias, acc1 = vn_splat(0.0f);
            #pragma GCC unroll 8
            for (long u = 0; u < KH; u++)
                #pragma GCC unroll 8
                for (long v = 0; v < KW; v++) {
                    ember_vn in = vn_load(base + (u * DH * Wp + v * DW) * 16);
                    if (u % 2) acc1 += wt[u * KW + v] * in;
                    else acc0 += wt[u * KW + v] * in;
                }
            vn_store(out + (i * g->OW + j) * 16, vn_activate(acc0 + acc1, act, lo, hi));
        }
}

/* Channels [c0, c0 + nch) through `mine` (dw_blocked_floats, its padding zeroed). */
static void dw_block(const ember_conv_geom *g, long c0, int nch, const float *w, const float *bias,
                     const float *residual, float *y, const ember_epilogue *ep, float *mine)
{
    long Hp = dw_padded_rows(g), Wp = dw_padded_cols(g), taps = g->KH * g->KW, plane = g->OH * g->OW;
    float *pad = mine, *out = pad + Hp * Wp * 16;
    ember_vn wt[64];
    float b[16] = {0};
    for (int l = 0; l < nch; l++) b[l] = bias ? bias[c0 + l] : 0.0f;
    for (long t = 0; t < taps; t++) {
        float lanes[16] = {0};
        for (int l = 0; l < nch; l++) lanes[l] = w[(c0 + l) * taps + t];
        wt[t] = vn_load(lanes);
    }
    dw_block_in(g, g->x + c0 * g->H * g->W, nch, pad, Wp, Hp);
    const float *rc = residual ? residual + c0 * plane : NULL;
    int in_reg = dw_act_in_register(ep, rc);
    int act = in_reg ? ep->act : EMBER_ACT_NONE;
    ember_vn lo = vn_act_low(ep->act, ep->alpha), hi = vn_splat(ep->beta);
    ember_vn bv = vn_load(b);
    int plain = g->DH == 1 && g->DW == 1 && g->SH == g->SW;
    if (plain && g->KH == 3 && g->KW == 3 && g->SH == 1) dw_block_pixels(g, 3, 3, 1, pad, Wp, wt, bv, act, lo, hi, out);
    else if (plain && g->KH == 3 && g->KW == 3 && g->SH == 2)
        dw_block_pixels(g, 3, 3, 2, pad, Wp, wt, bv, act, lo, hi, out);
    else if (plain && g->KH == 5 && g->KW == 5 && g->SH == 1) dw_block_pixels(g, 5, 5, 1, pad, Wp, wt, bv, act, lo, hi, out);
    else dw_block_pixels(g, g->KH, g->KW, 0, pad, Wp, wt, bv, act, lo, hi, out);
    float *yc = y + c0 * plane;
    dw_block_out(g, out, nch, yc);
    if (!in_reg)
        for (int l = 0; l < nch; l++) ember_finish_span(yc + l * plane, rc ? rc + l * plane : NULL, plane, ep);
}
#endif

void ember_depthwise(const ember_conv_geom *g, ember_dw_kernel kernel, const float *w, const float *bias,
                     const float *residual, float *y, const ember_epilogue *ep, float *scratch, int nthreads)
{
    long plane = g->OH * g->OW, taps = g->KH * g->KW;
#ifdef DW_BLOCK
    if (dw_blocked(g)) {
        memset(scratch, 0, (size_t)ember_depthwise_scratch_bytes(g, nthreads));
        long blocks = (g->C + DW_BLOCK - 1) / DW_BLOCK, per_thread = dw_blocked_floats(g);
        #pragma omp parallel for num_threads(nthreads) schedule(static) if(nthreads > 1 && blocks > 1)
        for (long bi = 0; bi < blocks; bi++) {
            long c0 = bi * DW_BLOCK;
            int nch = g->C - c0 < DW_BLOCK ? (int)(g->C - c0) : DW_BLOCK;
            dw_block(g, c0, nch, w, bias, residual, y, ep, scratch + (nthreads > 1 ? ember_thread_num() : 0) * per_thread);
        }
        return;
    }
#endif
    /* Contiguous runs of channels, the same thread's every call (the pool runs task t on the
     * same thread where it can): thread t then reads what it wrote where the previous step
     * split its channels the same way. Two depthwise convolutions in a row (144 channels,
     * 56x56) ran the second in 88 us split so, 101 us taking 4 channels at a time as they
     * came, and 134 us split by output rows (Xeon, 2 threads; 188 us on one). */
    /* The specialised kernel where g's columns plan (3x3 and 5x5 taps get kernels of their own
     * for every stride pair: MobileNets' equal ones, text recognisers' 2x1 and 1x2, where
     * PP-LCNet's ran 2x slower per tap unspecialised; other sizes one per stride pair). */
    dw_columns columns;
    const dw_columns *cols = kernel && dw_direct(g) && dw_plan_columns(g, &columns) ? &columns : NULL;
    #pragma omp parallel for num_threads(nthreads) schedule(static) if(nthreads > 1 && g->C > 1)
    for (long c = 0; c < g->C; c++) {
        const float *xc = g->x + c * g->H * g->W, *rc = residual ? residual + c * plane : NULL;
        if (cols) kernel(g, xc, w + c * taps, bias ? bias[c] : 0.0f, y + c * plane, rc, ep, cols);
        else dw_channel_general(g, xc, w + c * taps, bias ? bias[c] : 0.0f, y + c * plane, rc, ep);
    }
}
#endif
