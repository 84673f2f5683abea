/* 16-lane float vectors through GCC/Clang vector extensions, shared by the kernel library's
 * .c files: zmm on AVX-512, ymm pairs on AVX2, NEON quads on AArch64, scalar elsewhere.
 * Loads and stores go through memcpy, so no alignment is assumed. */
#ifndef EMBER_SIMD_H
#define EMBER_SIMD_H

#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
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

/* Lane-wise max and min; a NaN in `b` comes through (as np.maximum / np.minimum keep NaNs
 * when `b` is the data). */
static inline ember_v16 vmax(ember_v16 a, ember_v16 b) {
#if defined(__AVX512F__)
    return (ember_v16)_mm512_max_ps((__m512)a, (__m512)b);
#else
    return vselect(a > b, a, b);
#endif
}
static inline ember_v16 vmin(ember_v16 a, ember_v16 b) {
#if defined(__AVX512F__)
    return (ember_v16)_mm512_min_ps((__m512)a, (__m512)b);
#else
    return vselect(a < b, a, b);
#endif
}

/* Lanes whose bit is set in `mask` read p[l] (the others are zero) / are written to p[l];
 * only those lanes touch memory. */
static inline ember_v16 vload_masked(const float *p, uint32_t mask) {
#if defined(__AVX512F__)
    return (ember_v16)_mm512_maskz_loadu_ps((__mmask16)mask, p);
#else
    float lanes[16] = {0};
    for (int l = 0; l < 16; l++)
        if (mask >> l & 1u) lanes[l] = p[l];
    return vload(lanes);
#endif
}
static inline void vstore_masked(float *p, uint32_t mask, ember_v16 v) {
#if defined(__AVX512F__)
    _mm512_mask_storeu_ps(p, (__mmask16)mask, (__m512)v);
#else
    float lanes[16];
    vstore(lanes, v);
    for (int l = 0; l < 16; l++)
        if (mask >> l & 1u) p[l] = lanes[l];
#endif
}

#endif
