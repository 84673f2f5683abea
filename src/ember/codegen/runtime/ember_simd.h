/* Float vectors through GCC/Clang vector extensions, shared by the kernel library's .c files.
 * Loads and stores go through memcpy, so no alignment is assumed.
 *
 * ember_v16: 16 lanes whatever the target (zmm on AVX-512; elsewhere the compiler splits it),
 * for the AVX-512 GEMM tile and code that is not register-bound.
 * ember_vn: the target's native width, EMBER_VN_LANES floats (16 on AVX-512, 8 with AVX, 4
 * otherwise), for register-tiled kernels that must build everywhere: wider generic vectors
 * than the registers spill, and on SSE even a splat goes through memory. */
#ifndef EMBER_SIMD_H
#define EMBER_SIMD_H

#include <stdint.h>
#include <string.h>
#include "ember_config.h"
/* The few x86 intrinsics below come from <immintrin.h>, which alone costs ~0.15 CPU s of every
 * compile including it; a file defining EMBER_SIMD_BUILTINS first (the kernel library's GEMM
 * and im2col pieces, compiled on a fresh machine) takes them straight from GCC's builtins
 * instead, as <immintrin.h> calls them. Other compilers include the header anyway. */
#if (defined(__AVX512F__) || defined(__AVX2__)) && defined(EMBER_SIMD_BUILTINS) && defined(__GNUC__) \
    && !defined(__clang__)
#define EMBER_GCC_BUILTINS 1
#endif
#if defined(__AVX512F__) && !defined(EMBER_GCC_BUILTINS) || defined(__AVX2__) && !defined(EMBER_GCC_BUILTINS)
#include <immintrin.h>
#endif

typedef float ember_v16 __attribute__((vector_size(64)));
typedef int32_t ember_i16 __attribute__((vector_size(64)));

static inline ember_v16 vload(const float *p) { ember_v16 v; memcpy(&v, p, sizeof v); return v; }
static inline void vstore(float *p, ember_v16 v) { memcpy(p, &v, sizeof v); }
static inline ember_v16 vsplat(float x) { ember_v16 v = {0}; return v + x; }
static inline ember_v16 vselect(ember_i16 mask, ember_v16 a, ember_v16 b) {
    return (ember_v16)(((ember_i16)a & mask) | ((ember_i16)b & ~mask));
}

#if defined(__AVX512F__)
#define EMBER_VN_LANES 16
#elif defined(__AVX__)
#define EMBER_VN_LANES 8
#else
#define EMBER_VN_LANES 4
#endif
/* Python sizes per-vector padding (the depthwise row of zeros) for the widest vector. */
#if EMBER_VN_LANES > EMBER_MAX_VN_LANES
#error "EMBER_VN_LANES exceeds EMBER_MAX_VN_LANES (ember_config.h)"
#endif
typedef float ember_vn __attribute__((vector_size(EMBER_VN_LANES * 4)));
typedef int32_t ember_vni __attribute__((vector_size(EMBER_VN_LANES * 4)));

static inline ember_vn vn_load(const float *p) { ember_vn v; memcpy(&v, p, sizeof v); return v; }
static inline void vn_store(float *p, ember_vn v) { memcpy(p, &v, sizeof v); }
static inline ember_vn vn_splat(float x) { ember_vn v = {0}; return v + x; }
/* x in every lane, as one broadcast of a memory operand where x is loaded: x - 0 is x exactly
 * (-0.0 too), where vn_splat's 0 + x makes the compiler add first (-0.0 + 0.0 is +0.0), a
 * scalar add before each broadcast, which cost ember_conv_shallow's weight-broadcasting tile
 * 9% of its layer's time. vn_splat keeps its form: the kernels tuned with it measured 1% slower
 * with this one (ResNet-18's GEMM and Winograd tiles, Xeon). */
static inline ember_vn vn_broadcast(float x) { ember_vn zero = {0}; return x - zero; }
static inline ember_vn vn_select(ember_vni mask, ember_vn a, ember_vn b) {
    return (ember_vn)(((ember_vni)a & mask) | ((ember_vni)b & ~mask));
}

#if defined(EMBER_GCC_BUILTINS) && EMBER_VN_LANES == 16
/* The operands <immintrin.h> passes to the builtins: an undefined vector where every lane is
 * computed (_mm512_undefined_ps), a zero one where masked-off lanes read as zero. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-self"
#pragma GCC diagnostic ignored "-Wuninitialized"
static inline __attribute__((always_inline)) ember_vn vn_undefined(void) { ember_vn y = y; return y; }
#pragma GCC diagnostic pop
static inline __attribute__((always_inline)) ember_vn vn_zero(void) {
    return (ember_vn){0.0F, 0.0F, 0.0F, 0.0F, 0.0F, 0.0F, 0.0F, 0.0F, 0.0F, 0.0F, 0.0F, 0.0F, 0.0F, 0.0F, 0.0F, 0.0F};
}
#endif

/* Lane-wise max and min; a NaN in `b` comes through (as np.maximum / np.minimum keep NaNs
 * when `b` is the data). */
static inline ember_vn vn_max(ember_vn a, ember_vn b) {
#if EMBER_VN_LANES == 16 && defined(EMBER_GCC_BUILTINS)
    return __builtin_ia32_maxps512_mask(a, b, vn_undefined(), (unsigned short)-1, 4 /* _MM_FROUND_CUR_DIRECTION */);
#elif EMBER_VN_LANES == 16
    return (ember_vn)_mm512_max_ps((__m512)a, (__m512)b);
#else
    return vn_select(a > b, a, b);
#endif
}
static inline ember_vn vn_min(ember_vn a, ember_vn b) {
#if EMBER_VN_LANES == 16 && defined(EMBER_GCC_BUILTINS)
    return __builtin_ia32_minps512_mask(a, b, vn_undefined(), (unsigned short)-1, 4 /* _MM_FROUND_CUR_DIRECTION */);
#elif EMBER_VN_LANES == 16
    return (ember_vn)_mm512_min_ps((__m512)a, (__m512)b);
#else
    return vn_select(a < b, a, b);
#endif
}

/* The epilogue activations (ember_epilogue.act) that run on a vector in registers: relu, clip,
 * hard swish and leaky relu, with lo = vn_act_low(act, alpha) (relu's 0, clip's lower bound,
 * hard swish's scale, leaky relu's slope) and hi = beta splat (clip's upper bound, hard swish's
 * shift); any other act leaves v as it is (its caller runs it in memory). */
static inline ember_vn vn_activate(ember_vn v, int act, ember_vn lo, ember_vn hi) {
    if (act == EMBER_ACT_RELU) return vn_max(lo, v);
    if (act == EMBER_ACT_CLIP) return vn_min(hi, vn_max(lo, v));
    if (act == EMBER_ACT_HARD_SWISH)
        return lo * (v * vn_min(vn_splat(1.0f), vn_max(vn_splat(0.0f), v * (1.0f / 6.0f) + 0.5f))) + hi;
    if (act == EMBER_ACT_LEAKY_RELU) return vn_select(v >= vn_splat(0.0f), v, v * lo);
    return v;
}
static inline ember_vn vn_act_low(int act, float alpha) {
    return vn_splat(act == EMBER_ACT_CLIP || act == EMBER_ACT_HARD_SWISH || act == EMBER_ACT_LEAKY_RELU ? alpha : 0.0f);
}

#if EMBER_VN_LANES == 8 && defined(__AVX2__) && defined(EMBER_GCC_BUILTINS)
static inline ember_vni vn_lane_mask(uint32_t mask) {
    const ember_vni bit = {1, 2, 4, 8, 16, 32, 64, 128};
    return (bit & (int32_t)mask) != 0;
}
#elif EMBER_VN_LANES == 8 && defined(__AVX2__)
static inline __m256i vn_lane_mask(uint32_t mask) {
    const ember_vni bit = {1, 2, 4, 8, 16, 32, 64, 128};
    return (__m256i)((bit & (int32_t)mask) != 0);
}
#endif

/* Lanes whose bit is set in `mask` read p[l] (the others are zero) / are written to p[l];
 * only those lanes touch memory. */
static inline ember_vn vn_load_masked(const float *p, uint32_t mask) {
#if EMBER_VN_LANES == 16 && defined(EMBER_GCC_BUILTINS)
    return __builtin_ia32_loadups512_mask(p, vn_zero(), (unsigned short)mask);
#elif EMBER_VN_LANES == 16
    return (ember_vn)_mm512_maskz_loadu_ps((__mmask16)mask, p);
#elif EMBER_VN_LANES == 8 && defined(__AVX2__) && defined(EMBER_GCC_BUILTINS)
    return __builtin_ia32_maskloadps256((const ember_vn *)p, vn_lane_mask(mask));
#elif EMBER_VN_LANES == 8 && defined(__AVX2__)
    return (ember_vn)_mm256_maskload_ps(p, vn_lane_mask(mask));
#else
    float lanes[EMBER_VN_LANES] = {0};
    for (int l = 0; l < EMBER_VN_LANES; l++)
        if (mask >> l & 1u) lanes[l] = p[l];
    return vn_load(lanes);
#endif
}
static inline void vn_store_masked(float *p, uint32_t mask, ember_vn v) {
#if EMBER_VN_LANES == 16 && defined(EMBER_GCC_BUILTINS)
    __builtin_ia32_storeups512_mask(p, v, (unsigned short)mask);
#elif EMBER_VN_LANES == 16
    _mm512_mask_storeu_ps(p, (__mmask16)mask, (__m512)v);
#elif EMBER_VN_LANES == 8 && defined(__AVX2__) && defined(EMBER_GCC_BUILTINS)
    __builtin_ia32_maskstoreps256((ember_vn *)p, vn_lane_mask(mask), v);
#elif EMBER_VN_LANES == 8 && defined(__AVX2__)
    _mm256_maskstore_ps(p, vn_lane_mask(mask), (__m256)v);
#else
    float lanes[EMBER_VN_LANES];
    vn_store(lanes, v);
    for (int l = 0; l < EMBER_VN_LANES; l++)
        if (mask >> l & 1u) p[l] = lanes[l];
#endif
}

/* The 16 x 16 register transpose of ember_transpose_f32 (ember_transpose.c) and the depthwise
 * kernel's channel-blocked path. */
/* r[q][l] <- r[l][q]: four rounds in which the upper-right and lower-left quarters of every
 * 2b x 2b sub-block trade places (b = 8, 4, 2, 1), 64 two-source lane shuffles in all. */
static inline __attribute__((always_inline)) void ember_transpose16(ember_v16 r[16])
{
    static const ember_i16 lo[4] = {
        {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
        {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
        {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
        {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30}};
    static const ember_i16 hi[4] = {
        {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
        {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31},
        {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31},
        {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}};
    #pragma GCC unroll 4
    for (int s = 0; s < 4; s++) {
        int b = 8 >> s;
        #pragma GCC unroll 16
        for (int q = 0; q < 16; q++)
            if (!(q & b)) {
#ifdef __clang__
                ember_v16 top, bottom;
                for (int l = 0; l < 16; l++) {
                    top[l] = lo[s][l] < 16 ? r[q][lo[s][l]] : r[q + b][lo[s][l] - 16];
                    bottom[l] = hi[s][l] < 16 ? r[q][hi[s][l]] : r[q + b][hi[s][l] - 16];
                }
#else
                ember_v16 top = __builtin_shuffle(r[q], r[q + b], lo[s]);
                ember_v16 bottom = __builtin_shuffle(r[q], r[q + b], hi[s]);
#endif
                r[q] = top;
                r[q + b] = bottom;
            }
    }
}

#endif
