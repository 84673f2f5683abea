"""Spectral kernels: DFT and STFT.

Both run a mixed-radix decimation-in-time FFT (ember_fft_rec below) in double precision, as
the reference runs NumPy's float64 FFT: the length is split into its prime factors (smallest
first), radix 2 has its own butterfly, any other factor p a direct p-point DFT. A length's
cost is O(n * sum of its prime factors): O(n log n) for smooth lengths. Where that is worse
than three power-of-two FFTs (a large prime factor), Bluestein's algorithm runs the length
as a convolution of length m >= 2n - 1 (ember_fft_bluestein). Twiddles exp(-2 pi i e / n),
Bluestein's chirp and its convolution kernel's FFT are compile-time tables of doubles,
shared by every instruction of the same length; the inverse reads twiddles conjugated and
scales by 1/n.

One signal at a time per thread: it is loaded (cut or zero-padded to the DFT length; for
STFT one frame times the window) into double scratch, transformed, and written back rounded
once to the element type. Signals are split across threads in contiguous chunks."""
from __future__ import annotations

import math

import numpy as np

from ember.codegen.c_types import c_type
from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.linalg import chunk_loop, chunks
from ember.codegen.kernels.registry import KernelOptions, KernelPlan
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr

FFT_PREAMBLE = """\
/* Mixed-radix DIT FFT (spectral kernels): out[0..n) = DFT of in[0], in[stride], ...
   (interleaved re, im doubles). tw[e] = exp(-2 pi i e / total), read conjugated when
   sign is -1; tw_step = total / n; tmp holds 2 * (largest factor) doubles. */
static void ember_fft_rec(double *restrict out, const double *restrict in, long n, long stride,
                          const long *factors, const double *restrict tw, long tw_step, long total,
                          double sign, double *restrict tmp)
{
    const long p = factors[0], m = n / p;
    if (m == 1) {
        for (long j = 0; j < p; j++) { out[2 * j] = in[2 * j * stride]; out[2 * j + 1] = in[2 * j * stride + 1]; }
    } else {
        for (long j = 0; j < p; j++)
            ember_fft_rec(out + 2 * j * m, in + 2 * j * stride, m, stride * p, factors + 1, tw, tw_step * p,
                          total, sign, tmp);
    }
    if (p == 2) {
        for (long q = 0; q < m; q++) {
            const double c = tw[2 * q * tw_step], s = sign * tw[2 * q * tw_step + 1];
            double *a = out + 2 * q, *b = out + 2 * (q + m);
            const double br = b[0] * c - b[1] * s, bi = b[0] * s + b[1] * c;
            b[0] = a[0] - br; b[1] = a[1] - bi;
            a[0] += br; a[1] += bi;
        }
        return;
    }
    for (long q = 0; q < m; q++) {
        for (long j = 0; j < p; j++) { tmp[2 * j] = out[2 * (j * m + q)]; tmp[2 * j + 1] = out[2 * (j * m + q) + 1]; }
        for (long u = 0; u < p; u++) {
            const long k = q + u * m, step = k * tw_step;  /* k < n, so step < total */
            double re = 0.0, im = 0.0;
            for (long j = 0, e = 0; j < p; j++) {
                const double c = tw[2 * e], s = sign * tw[2 * e + 1];
                re += tmp[2 * j] * c - tmp[2 * j + 1] * s;
                im += tmp[2 * j] * s + tmp[2 * j + 1] * c;
                e += step; if (e >= total) e -= total;
            }
            out[2 * k] = re; out[2 * k + 1] = im;
        }
    }
}

/* Bluestein: the length-n DFT as a circular convolution of length m (a power of two >= 2n - 1):
   out[k] = chirp[k] * sum_t (in[t] chirp[t]) conj(chirp[k - t]), chirp[t] = exp(-pi i t^2 / n).
   kern is the FFT of conj(chirp) wrapped to m, divided by m; the inverse (sign -1) is the
   conjugate of the forward transform of the conjugate. a, b: 2m doubles each. */
static void ember_fft_bluestein(double *restrict out, const double *restrict in, long n, long m,
                                const long *factors, const double *restrict tw, const double *restrict chirp,
                                const double *restrict kern, double sign, double *restrict a,
                                double *restrict b, double *restrict tmp)
{
    for (long t = 0; t < n; t++) {
        const double xr = in[2 * t], xi = sign * in[2 * t + 1], cr = chirp[2 * t], ci = chirp[2 * t + 1];
        a[2 * t] = xr * cr - xi * ci; a[2 * t + 1] = xr * ci + xi * cr;
    }
    for (long t = 2 * n; t < 2 * m; t++) a[t] = 0.0;
    ember_fft_rec(b, a, m, 1, factors, tw, 1, m, 1.0, tmp);
    for (long j = 0; j < m; j++) {
        const double br = b[2 * j], bi = b[2 * j + 1], kr = kern[2 * j], ki = kern[2 * j + 1];
        b[2 * j] = br * kr - bi * ki; b[2 * j + 1] = br * ki + bi * kr;
    }
    ember_fft_rec(a, b, m, 1, factors, tw, 1, m, -1.0, tmp);
    for (long k = 0; k < n; k++) {
        const double yr = a[2 * k], yi = a[2 * k + 1], cr = chirp[2 * k], ci = chirp[2 * k + 1];
        out[2 * k] = yr * cr - yi * ci; out[2 * k + 1] = sign * (yr * ci + yi * cr);
    }
}
"""


def prime_factors(n: int) -> list[int]:
    """n's prime factors, smallest first ([1] for n = 1)."""
    factors, p = [], 2
    while p * p <= n:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    if n > 1 or not factors:
        factors.append(n)
    return factors


def twiddles(n: int) -> np.ndarray:
    """[n, 2] doubles: exp(-2 pi i e / n) as (re, im), e = 0 .. n-1."""
    return _pairs(np.exp(-2j * np.pi * np.arange(n) / n))


def fft_algorithm(n: int) -> tuple[int, int]:
    """(m, cost): the convolution length Bluestein runs n on, or 0 where the mixed-radix FFT is
    cheaper, and the estimated complex multiply-adds of one transform: n * (sum of n's prime
    factors) for mixed radix, three radix-2 FFTs of length m plus the chirps for Bluestein."""
    m = 1 << (2 * n - 2).bit_length()
    direct = n * sum(prime_factors(n))
    bluestein = 3 * m * 2 * (m.bit_length() - 1) + 8 * m
    return (m, bluestein) if bluestein < direct else (0, direct)


def bluestein_tables(n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(chirp [n, 2], kern [m, 2]) doubles: chirp[t] = exp(-pi i t^2 / n), with t^2 reduced
    mod 2n exactly in integers; kern = FFT(conj(chirp) wrapped circularly to m) / m."""
    t = np.arange(n, dtype=np.int64)
    chirp = np.exp(-1j * np.pi * ((t * t) % (2 * n)) / n)
    wrapped = np.zeros(m, np.complex128)
    wrapped[:n] = np.conj(chirp)
    wrapped[m - n + 1:] = np.conj(chirp[1:])[::-1]
    kern = np.fft.fft(wrapped) / m
    return _pairs(chirp), _pairs(kern)


def _pairs(z: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.stack([z.real, z.imag], axis=-1))


def _scratch_doubles(n: int, m: int) -> int:
    """Per thread: the loaded signal, its transform, Bluestein's two convolution buffers (m
    complex each), the butterfly's gather."""
    return 4 * n + 4 * m + 2 * max(prime_factors(m or n))


def _fft_plan(n: int, signals: int, options: KernelOptions) -> KernelPlan:
    m, cost = fft_algorithm(n)
    threads = chunks(options, signals, signals * cost * 4)
    tables = [(f"n{m or n}", "fft_twiddles", twiddles(m or n))]
    if m:
        chirp, kern = bluestein_tables(n, m)
        tables += [(f"n{n}", "bluestein_chirp", chirp), (f"n{n}_m{m}", "bluestein_kernel", kern)]
    return KernelPlan({"threads": threads, "bluestein": m}, tables=tables,
                      scratch_bytes=threads * _scratch_doubles(n, m) * 8)


def _fft_kernel(em: Emitter, instr: Instr, n: int, inverse: bool, count: int, load: list[str],
                store: list[str]) -> str:
    """The signal loop: per signal `b`, `load` fills zin (n complex doubles), the FFT writes
    zout, `store` writes it back; `c` (the chunk) picks this thread's scratch."""
    m = param(instr, "bluestein", 0)
    factors = ", ".join(str(f) for f in prime_factors(m or n))
    sign = "-1.0" if inverse else "1.0"
    if m:
        call = (f"ember_fft_bluestein(zout, zin, {n}, {m}, factors, tw, {em.table(instr, 1)}, "
                f"{em.table(instr, 2)}, {sign}, ca, ca + {2 * m}, tmp);")
    else:
        call = f"ember_fft_rec(zout, zin, {n}, 1, factors, tw, 1, {n}, {sign}, tmp);"
    body = [
        f"double *zin = scratch + c * {_scratch_doubles(n, m)}, *zout = zin + {2 * n}, *ca = zout + {2 * n};",
        f"double *tmp = ca + {4 * m}; (void)ca;",
        *load,
        call,
        *store,
    ]
    return "\n".join([
        f"static const long factors[] = {{{factors}}};",
        f"const double *tw = {em.table(instr)};",
        f"double *scratch = (double *){em.scratch(instr)};",
        *chunk_loop(instr, count, body),
    ])


def _load(index: str, components: int, scale: str = "") -> str:
    """`re`, `im` of element `index` of x (a real signal has im 0), times `scale`."""
    times = f" * {scale}" if scale else ""
    im = f"(double)x[{index} + 1]{times}" if components == 2 else "0.0"
    return f"const double re = (double)x[{index}]{times}, im = {im};"


# DFT --------------------------------------------------------------------------------------


def _dft_shape(instr: Instr) -> tuple[int, int, int, int]:
    """(outer, signal length in, inner, components in) of the DFT's operand."""
    shape = instr.operand(1).type.shape
    axis = instr.attrs.axis
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:-1]), shape[-1]


def _dft_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    outer, _, inner, _ = _dft_shape(instr)
    return _fft_plan(instr.attrs.length, outer * inner, options)


@C_KERNELS.kernel("dft_fft", "DFT", plan=_dft_plan, preamble=FFT_PREAMBLE)
def emit_dft(em: Emitter, instr: Instr) -> str:
    """Forward: bins of fft(x cut/padded to n). Inverse: ifft likewise. Inverse one-sided
    (irfft): the first n/2 + 1 bins (cut/padded) extended Hermitian to n, inverse transformed,
    the real part kept: the imaginary parts of bin 0 and of bin n/2 drop out, as in NumPy's."""
    out, x = instr.required()
    attrs = instr.attrs
    n = attrs.length
    outer, n_in, inner, cin = _dft_shape(instr)
    bins, cout = out.type.shape[attrs.axis], out.type.shape[-1]
    count = outer * inner
    if out.type.size == 0:
        return "/* empty result */"
    t = c_type(out.type.dtype)
    x_step, y_step = inner * cin, inner * cout
    if attrs.inverse and attrs.onesided:
        half = n // 2 + 1
        load = [
            f"for (long k = 0; k < {half}; k++) {{",
            f"    if (k >= {n_in}) {{ zin[2 * k] = zin[2 * k + 1] = 0.0; continue; }}",
            f"    {_load(f'xs + k * {x_step}', cin)}",
            "    zin[2 * k] = re; zin[2 * k + 1] = im;",
            "}",
            f"for (long k = {half}; k < {n}; k++) {{ zin[2 * k] = zin[2 * ({n} - k)]; "
            f"zin[2 * k + 1] = -zin[2 * ({n} - k) + 1]; }}",
        ]
    else:
        load = [
            f"for (long k = 0; k < {n}; k++) {{",
            f"    if (k >= {n_in}) {{ zin[2 * k] = zin[2 * k + 1] = 0.0; continue; }}",
            f"    {_load(f'xs + k * {x_step}', cin)}",
            "    zin[2 * k] = re; zin[2 * k + 1] = im;",
            "}",
        ]
    load = [
        f"const long o = b / {inner}, i = b % {inner};",
        f"const long xs = (o * {n_in * inner} + i) * {cin};",
        f"{t} *ys = y + (o * {bins * inner} + i) * {cout};",
        *load,
    ]
    scale = f" * {(1.0 / n).hex()}" if attrs.inverse else ""
    imag = f" ys[k * {y_step} + 1] = ({t})(zout[2 * k + 1]{scale});" if cout == 2 else ""
    store = [f"for (long k = 0; k < {bins}; k++) {{ ys[k * {y_step}] = ({t})(zout[2 * k]{scale});{imag} }}"]
    return "\n".join([
        f"{t} *y = {em.pointer(out)};",
        f"const {t} *x = {em.pointer(x, const=True)};",
        _fft_kernel(em, instr, n, attrs.inverse, count, load, store),
    ])


# STFT -------------------------------------------------------------------------------------


def _stft_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    out = instr.operand(0)
    return _fft_plan(instr.attrs.frame_length, out.type.shape[0] * out.type.shape[1], options)


@C_KERNELS.kernel("stft_fft", "STFT", plan=_stft_plan, preamble=FFT_PREAMBLE)
def emit_stft(em: Emitter, instr: Instr) -> str:
    """Frame f of batch b is x[b, f * step + t] (times window[t]), t < frame_length; its
    first `bins` DFT bins go to y[b, f]."""
    out, x, window = instr.base_operands
    assert out is not None and x is not None
    attrs = instr.attrs
    n, step = attrs.frame_length, attrs.frame_step
    batch, frames, bins, _ = out.type.shape
    length, cin = x.type.shape[1], x.type.shape[2]
    if out.type.size == 0:
        return "/* empty result */"
    t = c_type(out.type.dtype)
    lines = [f"{t} *y = {em.pointer(out)};", f"const {t} *x = {em.pointer(x, const=True)};"]
    if window is not None:
        lines.append(f"const {c_type(window.type.dtype)} *win = {em.pointer(window, const=True)};")
    load = [
        f"const long xs = ((b / {frames}) * {length} + (b % {frames}) * {step}) * {cin};",
        f"{t} *ys = y + b * {bins * 2};",
        f"for (long k = 0; k < {n}; k++) {{",
        f"    {_load(f'xs + k * {cin}', cin, '(double)win[k]' if window is not None else '')}",
        "    zin[2 * k] = re; zin[2 * k + 1] = im;",
        "}",
    ]
    store = [f"for (long k = 0; k < {2 * bins}; k++) ys[k] = ({t})zout[k];"]
    lines.append(_fft_kernel(em, instr, n, False, batch * frames, load, store))
    return "\n".join(lines)

