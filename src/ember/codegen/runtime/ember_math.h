/* Branch-free float math for generated loops: written with selects instead of libm calls so
 * that GCC and Clang vectorize the loops that use them (libm's expf/erff/tanhf are scalar).
 * Accuracy: exp and tanh within ~2 ulp (Cephes), erf within 1.2e-7 absolute.
 * always_inline: in a long generated function (an unrolled recurrence has hundreds of loops)
 * GCC's inlining budget runs out and leaves calls, which keep those loops scalar. */
#ifndef EMBER_MATH_H
#define EMBER_MATH_H

#include <stdint.h>
#include <string.h>

static inline __attribute__((always_inline)) float ember_expf(float x)
{
    /* e^x = 2^n * e^r with r = x - n ln2 in [-ln2/2, ln2/2]; ln2 split in two for accuracy.
     * NaN goes through as NaN: computed on 0 (converting NaN to an integer is undefined),
     * then selected back, which stays a vector blend. */
    float nan_in = x;
    x = x != x ? 0.0f : x;
    x = x > 88.3762626647949f ? 88.3762626647949f : x;
    x = x < -87.3365447504f ? -87.3365447504f : x;
    /* Round to nearest by adding and removing 1.5 * 2^23: plain arithmetic, so it vectorizes
     * (roundf does not without -ffast-math). */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return nan_in != nan_in ? nan_in : p * scale;
}

static inline __attribute__((always_inline)) float ember_erff(float x)
{
    /* Numerical Recipes erfc Chebyshev fit (fractional error < 1.2e-7), as the interpreter. */
    float z = x < 0.0f ? -x : x;
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    float erfc = t * ember_expf(-z * z + p);
    return x >= 0.0f ? 1.0f - erfc : erfc - 1.0f;
}

static inline __attribute__((always_inline)) float ember_tanhf(float x)
{
    float z = x < 0.0f ? -x : x;
    /* Small inputs: odd polynomial (Cephes tanhf), avoiding cancellation in the exp form. */
    float s = x * x;
    float small = ((((-5.70498872745e-3f * s + 2.06390887954e-2f) * s - 5.37397155531e-2f) * s
                    + 1.33314422036e-1f) * s - 3.33332819422e-1f) * s * x + x;
    float big = 1.0f - 2.0f / (ember_expf(2.0f * (z > 9.0f ? 9.0f : z)) + 1.0f);
    big = x < 0.0f ? -big : big;
    return z < 0.625f ? small : big;
}

static inline __attribute__((always_inline)) float ember_sigmoidf(float x)
{
    return 1.0f / (1.0f + ember_expf(-x));
}

#endif
