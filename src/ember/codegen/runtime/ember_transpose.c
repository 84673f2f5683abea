/* Blocked transposes for the kernels that move a tensor between [C][pixels] (NCHW) and
 * [pixels][C] around a GEMM whose rows are pixels (conv_pixel_rows' im2row, Winograd F(4x4, 3x3),
 * InvertedResidual). A file of its own, so a convolution links it without the depthwise
 * kernel. See ember_gemm.h. */
#define EMBER_SIMD_BUILTINS 1 /* ember_simd.h: no <immintrin.h> needed (compile time) */
#include "ember_gemm.h"
#include "ember_simd.h"

/* dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols: 16 x 16 blocks in registers, the
 * rows and columns past the last full block element by element. For the kernels that move a
 * tensor between [C][pixels] (NCHW) and [pixels][C] around a GEMM whose rows are pixels
 * (conv_pixel_rows, InvertedResidual): there, A read row-major and C stored row-major with the
 * epilogue in registers measured faster than strided A and tiles stored transposed. */
void ember_transpose_f32(const float *src, long rows, long cols, long lds, float *dst, long ldd)
{
    long i = 0;
    for (; i + 16 <= rows; i += 16) {
        long j = 0;
        for (; j + 16 <= cols; j += 16) {
            ember_v16 r[16];
            for (int q = 0; q < 16; q++) r[q] = vload(src + (i + q) * lds + j);
            ember_transpose16(r);
            for (int q = 0; q < 16; q++) vstore(dst + (j + q) * ldd + i, r[q]);
        }
        for (; j < cols; j++)
            for (int q = 0; q < 16; q++) dst[j * ldd + i + q] = src[(i + q) * lds + j];
    }
    for (; i < rows; i++)
        for (long j = 0; j < cols; j++) dst[j * ldd + i] = src[i * lds + j];
}

