/* Blocked transposes for the kernels that move a tensor between [C][pixels] (NCHW) and
 * [pixels][C] around a GEMM whose rows are pixels (conv_pixel_rows' im2row, Winograd F(4x4, 3x3),
 * InvertedResidual). A file of its own, so a convolution links it without the depthwise
 * kernel. See ember_gemm.h. */
#define EMBER_SIMD_BUILTINS 1 /* ember_simd.h: no <immintrin.h> needed (compile time) */
#include "ember_gemm.h"
#include "ember_simd.h"

/* dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols: 16 x 16 blocks in registers, the
 * rows and columns past the last full block element by element. Around a pixels-as-rows GEMM,
 * A read row-major and C stored row-major with the epilogue in registers measured faster than
 * strided A and tiles stored transposed. */
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

/* ember_transpose_f32 split across threads along its longer side, in bands of whole 16 x 16
 * blocks (below EMBER_PARALLEL_COPY_FLOATS the region costs more than it saves): the
 * transposes around a pixels-as-rows GEMM ran on one thread and held 2-thread MobileNetV2
 * blocks to 1.2-1.5x their 1-thread speed. */
void ember_transpose_f32_threads(const float *src, long rows, long cols, long lds, float *dst, long ldd, int nthreads)
{
    if (nthreads <= 1 || rows * cols < EMBER_PARALLEL_COPY_FLOATS) {
        ember_transpose_f32(src, rows, cols, lds, dst, ldd);
        return;
    }
    int along_rows = rows >= cols;
    long side = along_rows ? rows : cols, blocks = (side + 15) / 16;
    long per = (blocks + nthreads - 1) / nthreads * 16;
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (long t = 0; t < nthreads; t++) {
        long lo = t * per, n = side - lo < per ? side - lo : per;
        if (n <= 0) continue;
        if (along_rows) ember_transpose_f32(src + lo * lds, n, cols, lds, dst + lo, ldd);
        else ember_transpose_f32(src + lo, rows, n, lds, dst + lo * ldd, ldd);
    }
}

/* ember_finish_span (residual and activation) split across threads, as above. */
void ember_finish_span_threads(float *y, const float *residual, long n, const ember_epilogue *ep, int nthreads)
{
    if (nthreads <= 1 || n < EMBER_PARALLEL_COPY_FLOATS) {
        ember_finish_span(y, residual, n, ep);
        return;
    }
    long per = (n / nthreads + 15) / 16 * 16;
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (long t = 0; t < nthreads; t++) {
        long lo = t * per, m = n - lo < per ? n - lo : per;
        if (m > 0) ember_finish_span(y + lo, residual ? residual + lo : NULL, m, ep);
    }
}
