/* Branch-free float math for generated loops: written with selects instead of libm calls so
 * that GCC and Clang vectorize the loops that use them (libm's expf/erff/tanhf are scalar).
 * Accuracy: exp and tanh within ~2 ulp (Cephes), erf within 1.2e-7 absolute.
 * always_inline: in a long generated function (an unrolled recurrence has hundreds of loops)
 * GCC's inlining budget runs out and leaves calls, which keep those loops scalar. */
#ifndef EMBER_MATH_H
#define EMBER_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* An integer to a non-negative integer power, exactly, modulo 2^64 (two's complement bits: the
   same low bits for a signed base): Pow of integers as ops/elementwise.py defines it. */
static inline uint64_t ember_ipow(uint64_t base, uint64_t exponent)
{
    uint64_t result = 1;
    while (exponent) {
        if (exponent & 1) result *= base;
        base *= base;
        exponent >>= 1;
    }
    return result;
}

/* e^x's range reduction and polynomial, as macros so that ember_expf and the kernels' own
 * vector exps (a float or a GCC vector of floats) compute them alike: n = round(x / ln2),
 * r = x - n ln2 in [-ln2/2, ln2/2] with ln2 split in two for accuracy, e^r = EMBER_EXP_POLY(r). */
#define EMBER_EXP_ROUND(x) (((x) * 1.44269504088896341f + 12582912.0f) - 12582912.0f)
#define EMBER_EXP_REDUCED(x, n) (((x) - (n) * 0.693359375f) - (n) * -2.12194440e-4f)
#define EMBER_EXP_POLY(r) \
    ((((((1.9875691500e-4f * (r) + 1.3981999507e-3f) * (r) + 8.3334519073e-3f) * (r) + 4.1665795894e-2f) * (r) \
       + 1.6666665459e-1f) * (r) + 5.0000001201e-1f) * (r) * (r) + (r) + 1.0f)

static inline __attribute__((always_inline)) float ember_expf(float x)
{
    /* e^x = 2^n * e^r (EMBER_EXP_*). NaN goes through as NaN: computed on 0 (converting NaN
     * to an integer is undefined), then selected back, which stays a vector blend. 2^n is applied as two halves, each a
     * normal float, so results past FLT_MAX overflow to inf and tiny ones go subnormal or
     * to 0 as expf's do (inputs clamped where the result already is inf or 0). */
    float nan_in = x;
    x = x != x ? 0.0f : x;
    x = x > 89.0f ? 89.0f : x;
    x = x < -104.0f ? -104.0f : x;
    /* Rounds to nearest by adding and removing 1.5 * 2^23: plain arithmetic, so it vectorizes
     * (roundf does not without -ffast-math). */
    float n = EMBER_EXP_ROUND(x);
    float r = EMBER_EXP_REDUCED(x, n);
    float p = EMBER_EXP_POLY(r);
    int32_t half = (int32_t)n >> 1;
    uint32_t bits1 = (uint32_t)(half + 127) << 23, bits2 = (uint32_t)((int32_t)n - half + 127) << 23;
    float scale1, scale2;
    memcpy(&scale1, &bits1, sizeof scale1);
    memcpy(&scale2, &bits2, sizeof scale2);
    return nan_in != nan_in ? nan_in : p * scale1 * scale2;
}

/* erf as a rational function x P(x^2) / Q(x^2) of x clamped to [-4, 4] (erf(4) rounds to 1
 * in float): the minimax fit Eigen (generic_fast_erf_float) and XLA use, absolute error
 * 3.3e-7 against libm's erf over [-6, 6] and relative error small near 0 (an odd
 * polynomial). 13 multiply-adds and one division, no exp: Gelu's epilogue over
 * MiniLM's 1536-wide intermediate layers took 3.3x longer with the Numerical Recipes erfc
 * fit (a division and an exp) that the float64 reference (ops/math_util.py) uses. */
static inline __attribute__((always_inline)) float ember_erff(float x)
{
    float c = x > 4.0f ? 4.0f : x;
    c = c < -4.0f ? -4.0f : c;
    float c2 = c * c;
    float p = c2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
    p = c2 * p - 2.10102402082508e-06f;
    p = c2 * p - 5.69250639462346e-05f;
    p = c2 * p - 7.34990630326855e-04f;
    p = c2 * p - 2.95459980854025e-03f;
    p = c2 * p - 1.60960333262415e-02f;
    float q = c2 * -1.45660718464996e-05f - 2.13374055278905e-04f;
    q = c2 * q - 1.68282697438203e-03f;
    q = c2 * q - 7.37332916720468e-03f;
    q = c2 * q - 1.42647390514189e-02f;
    return x != x ? x : c * p / q;  /* q <= -0.0142: never 0 */
}

/* Gelu's erf form exactly as the elementwise kernel writes it (elementwise.py _gelu), so the
 * GEMM epilogues' fused Gelu computes what the unfused one does. */
static inline __attribute__((always_inline)) float ember_geluf(float x)
{
    return 0.5f * x * (1.0f + ember_erff(x * 0x1.6a09e6p-1f));
}

static inline __attribute__((always_inline)) float ember_tanhf(float x)
{
    float z = x < 0.0f ? -x : x;
    /* Small inputs: odd polynomial (Cephes tanhf), avoiding cancellation in the exp form. */
    float s = x * x;
    float small = ((((-5.70498872745e-3f * s + 2.06390887954e-2f) * s - 5.37397155531e-2f) * s
                    + 1.33314422036e-1f) * s - 3.33332819422e-1f) * s * x + x;
    /* Clamped where e^2z is still finite: past z = 9.01 this is exactly 1, as tanhf is (a
     * clamp at 9 left 1 - 3e-8, so x * (1 + tanh(-x)) for x = -1e30 was -3e22, not -0). */
    float big = 1.0f - 2.0f / (ember_expf(2.0f * (z > 44.0f ? 44.0f : z)) + 1.0f);
    big = x < 0.0f ? -big : big;
    return z < 0.625f ? small : big;
}

/* The epilogue's hard_swish: alpha * x * clip(x / 6 + 1/2, 0, 1) + beta (a NaN stays NaN). */
static inline __attribute__((always_inline)) float ember_hard_swishf(float x, float alpha, float beta)
{
    float h = x * (1.0f / 6.0f) + 0.5f;
    h = h < 0.0f ? 0.0f : h;
    h = h > 1.0f ? 1.0f : h;
    return alpha * (x * h) + beta;
}

static inline __attribute__((always_inline)) float ember_sigmoidf(float x)
{
    return 1.0f / (1.0f + ember_expf(-x));
}

/* 16-bit floats (IEEE half and bfloat16) are stored as their bits (uint16_t) and computed in
 * float: these convert exactly one way and with round-to-nearest-even the other, as NumPy,
 * ml_dtypes and ONNX's Cast do. Plain integer and float arithmetic, so any C99 target has them
 * and loops over them vectorize. */
static inline __attribute__((always_inline)) float ember_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
    if (exp == 0x1fu) {
        bits = sign | 0x7f800000u | (mant << 13);                /* inf, NaN (payload kept) */
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);        /* normal: rebias 15 -> 127 */
    } else {
        float sub = (float)mant * 0x1p-24f;                      /* zero or subnormal: exact */
        memcpy(&bits, &sub, sizeof bits);
        bits |= sign;
    }
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

static inline __attribute__((always_inline)) uint16_t ember_f32_to_f16(float value)
{
    /* F. Giesen's float_to_half_fast3_rtne: subnormal results by adding a magic number (the
     * float adder rounds to nearest even), normal ones by rebiasing with a rounding bias. */
    const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    uint32_t f;
    memcpy(&f, &value, sizeof f);
    uint32_t sign = f & 0x80000000u;
    f ^= sign;
    uint16_t out;
    if (f >= (127u + 16u) << 23) {                                /* >= 65536, inf or NaN */
        out = f > 0x7f800000u ? (uint16_t)(0x7e00u | ((f >> 13) & 0x3ffu)) : 0x7c00u;
    } else if (f < 113u << 23) {                                  /* below half's normal range */
        float x, magic;
        memcpy(&x, &f, sizeof x);
        memcpy(&magic, &denorm_magic, sizeof magic);
        x += magic;
        uint32_t bits;
        memcpy(&bits, &x, sizeof bits);
        out = (uint16_t)(bits - denorm_magic);
    } else {
        uint32_t odd = (f >> 13) & 1u;
        f += (uint32_t)(15 - 127) * (1u << 23) + 0xfffu + odd;    /* unsigned wrap-around intended */
        out = (uint16_t)(f >> 13);
    }
    return (uint16_t)(out | (sign >> 16));
}

static inline __attribute__((always_inline)) float ember_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

static inline __attribute__((always_inline)) uint16_t ember_f32_to_bf16(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((bits >> 16) | 0x40u);                  /* NaN stays a quiet NaN */
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* double -> float rounding to odd: the float keeps a sticky last bit, so rounding it again to
 * half or bfloat16 (11 and 8 bits, both at most 24 / 2 - 1) gives the correctly rounded result
 * of the double, with no double rounding. */
static inline float ember_f64_to_f32_odd(double d)
{
    float f = (float)d;
    if (f == f && (double)f != d) {
        if ((d < 0 ? -(double)f : (double)f) > (d < 0 ? -d : d))
            f = nextafterf(f, 0.0f);                              /* toward zero: truncated */
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        bits |= 1u;
        memcpy(&f, &bits, sizeof f);
    }
    return f;
}

/* The narrow types (float8 in four flavours, float4 E2M1, int4/uint4, int2/uint2) are stored
 * one element per byte, as ml_dtypes stores them, and only converted: from float32 with
 * round-to-nearest-even, to float32 exactly. A float format is its exponent and mantissa widths,
 * its bias and how it spends the top codes (kind). The parameters are compile-time constants at
 * every call, so the compiler folds the branches away. */
enum { EMBER_NARROW_FN = 0,      /* no infinities; NaN = all exponent and mantissa bits (e4m3fn) */
       EMBER_NARROW_IEEE = 1,    /* infinities and NaNs as in IEEE (e5m2) */
       EMBER_NARROW_FNUZ = 2,    /* no infinities, no -0; NaN = the -0 code 0x80 (e4m3fnuz, e5m2fnuz) */
       EMBER_NARROW_E2M1 = 3 };  /* no infinities, no NaN (float4 e2m1) */

static inline __attribute__((always_inline)) float ember_narrow_to_f32(uint8_t b, int E, int M, int bias,
                                                                      int kind)
{
    int sign = (b >> (E + M)) & 1, e = (b >> M) & ((1 << E) - 1), m = b & ((1 << M) - 1);
    if (kind == EMBER_NARROW_FNUZ && b == 0x80)
        return NAN;
    if (kind == EMBER_NARROW_FN && e == (1 << E) - 1 && m == (1 << M) - 1)
        return sign ? -NAN : NAN;
    if (kind == EMBER_NARROW_IEEE && e == (1 << E) - 1)
        return m ? (sign ? -NAN : NAN) : (sign ? -INFINITY : INFINITY);
    float v = e ? ldexpf((float)((1 << M) | m), e - bias - M) : ldexpf((float)m, 1 - bias - M);
    return sign ? -v : v;
}

static inline __attribute__((always_inline)) uint8_t ember_f32_to_narrow(float x, int E, int M, int bias,
                                                                        int kind, int saturate)
{
    uint8_t sign = signbit(x) ? (uint8_t)(1u << (E + M)) : 0;
    if (x != x)  /* NaN; float4 has none: ml_dtypes gives it the zero of the opposite sign */
        return kind == EMBER_NARROW_FNUZ ? 0x80 : kind == EMBER_NARROW_E2M1 ? (uint8_t)(sign ^ (1u << (E + M)))
             : (uint8_t)(sign | (kind == EMBER_NARROW_FN ? 0x7f : 0x7e));
    int top = kind == EMBER_NARROW_IEEE ? (1 << E) - 2 : (1 << E) - 1;   /* largest finite exponent code */
    int max_code = (top << M) | ((1 << M) - 1 - (kind == EMBER_NARROW_FN));
    float a = fabsf(x);
    int code = max_code + 1;                                             /* overflow unless found below */
    if (a < ldexpf(1.0f, 1 - bias)) {                                    /* zero or subnormal */
        code = (int)nearbyintf(ldexpf(a, bias - 1 + M));                 /* 2^M: the smallest normal */
    } else if (a <= ldexpf(2.0f, top - bias)) {
        int e;
        frexpf(a, &e);                                                   /* a = f * 2^e, f in [0.5, 1) */
        int n = (int)nearbyintf(ldexpf(a, M - (e - 1)));                 /* 2^M..2^(M+1): carries over */
        code = ((e - 1 + bias) << M) + n - (1 << M);
    }
    if (code > max_code) {
        if (saturate || kind == EMBER_NARROW_E2M1)
            code = max_code;
        else if (kind == EMBER_NARROW_IEEE)
            return (uint8_t)(sign | (((1 << E) - 1) << M));              /* infinity */
        else
            return kind == EMBER_NARROW_FNUZ ? 0x80 : (uint8_t)(sign | 0x7f);
    }
    if (kind == EMBER_NARROW_FNUZ && code == 0)
        return 0;
    return (uint8_t)(sign | code);
}

/* int4/uint4/int2/uint2 from a float: truncated toward zero and wrapped, as ml_dtypes does;
 * NaN and infinities give 0. The byte keeps the low `bits` bits. */
static inline __attribute__((always_inline)) uint8_t ember_float_to_narrow_int(double v, int bits)
{
    if (!(v == v) || isinf(v))
        return 0;
    double t = fmod(trunc(v), (double)(1 << bits));
    return (uint8_t)((int64_t)t & ((1 << bits) - 1));
}

#endif
