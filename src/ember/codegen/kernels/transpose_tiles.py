"""A matrix transpose in 16 x 16 register blocks, defined once per generated file for the
kernels that change a tensor between [C][pixels] (NCHW) and [pixels][C] around a GEMM whose
rows are pixels (conv_pointwise_t): there, A read row-major and C stored row-major with the
epilogue in registers measured faster than strided A and tiles stored transposed.

Each block is four rounds of two-source lane shuffles (the upper-right and lower-left
quarters of every 2b x 2b sub-block trade places, b = 8, 4, 2, 1), 64 shuffles per 256
floats; rows and columns past the last full block go element by element."""
from __future__ import annotations

from ember.codegen.emitter import Emitter

TRANSPOSE = "ember_transpose_f32"

_C = r"""
/* dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols (see transpose_tiles.py). */
typedef float ember_tt_v16 __attribute__((vector_size(64)));
typedef int ember_tt_i16 __attribute__((vector_size(64)));
static inline ember_tt_v16 ember_tt_mix(ember_tt_v16 a, ember_tt_v16 b, ember_tt_i16 idx)
{
#if defined(__clang__)
    ember_tt_v16 out;
    for (int l = 0; l < 16; l++) out[l] = idx[l] < 16 ? a[idx[l]] : b[idx[l] - 16];
    return out;
#else
    return __builtin_shuffle(a, b, idx);
#endif
}
static void ember_transpose_f32(const float *src, long rows, long cols, long lds, float *dst, long ldd)
{
    static const ember_tt_i16 lo[4] = {
        {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
        {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
        {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
        {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30}};
    static const ember_tt_i16 hi[4] = {
        {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
        {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31},
        {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31},
        {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}};
    long i = 0;
    for (; i + 16 <= rows; i += 16) {
        long j = 0;
        for (; j + 16 <= cols; j += 16) {
            ember_tt_v16 r[16];
            for (int q = 0; q < 16; q++) memcpy(&r[q], src + (i + q) * lds + j, sizeof r[q]);
            #pragma GCC unroll 4
            for (int s = 0; s < 4; s++)
                #pragma GCC unroll 16
                for (int q = 0, b = 8 >> s; q < 16; q++)
                    if (!(q & b)) {
                        ember_tt_v16 top = ember_tt_mix(r[q], r[q + b], lo[s]);
                        r[q + b] = ember_tt_mix(r[q], r[q + b], hi[s]);
                        r[q] = top;
                    }
            for (int q = 0; q < 16; q++) memcpy(dst + (j + q) * ldd + i, &r[q], sizeof r[q]);
        }
        for (; j < cols; j++)
            for (int q = 0; q < 16; q++) dst[j * ldd + i + q] = src[(i + q) * lds + j];
    }
    for (; i < rows; i++)
        for (long j = 0; j < cols; j++) dst[j * ldd + i] = src[i * lds + j];
}
"""


def define_transpose(em: Emitter) -> str:
    """Defines the transpose in the generated file (once) and returns its name."""
    em.define(TRANSPOSE, _C)
    return TRANSPOSE
