"""qconv_depthwise: QLinearConv with one input and one output channel per group (MobileNet's
depthwise convolutions), symmetric int8 weights and constant parameters; tried before
qconv_im2col, which would run each channel as its own GEMM with 63 of 64 columns empty.

Per channel, the input is copied into its stride phase planes with the zero point in the
padding (as qconv_direct does for all channels); on a grid of as many columns as the planes
(the output's and a few more, dropped as rows are stored), each tap is then one contiguous
loop over the whole output, acc[q] += plane[shift + q] * w, which the compiler vectorizes.
Then exactly the interpreter's requantization (qconv_direct's tables: the zero-point
correction and the bias in int32, x_scale * w_scale / y_scale in float64, rounding
half to even) and a contiguous store of the row. Channels split across threads, each with its
own planes."""
from __future__ import annotations

import numpy as np

from ember.codegen.c_writer import CWriter
from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.layouts import threads_for
from ember.codegen.kernels.qconv_direct import _dims, _Operands, _roles, bias_fits_int32, channel_tables
from ember.codegen.kernels.registry import Kernel, KernelOptions, KernelPlan, OpView, is_whole_weight
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.types import DType


def _accepts(view: OpView) -> str | None:
    x, w, out = view.operand(0), view.operand(3), view.results[0]
    attrs = view.attrs
    if x.rank != 4 or attrs.group != x.shape[1] or w.shape[0] != x.shape[1] or w.shape[1] != 1 \
            or any(d != 1 for d in attrs.dilations):
        return "qconv_depthwise takes 2-D convolutions of one input and one output channel per group, no dilation"
    if x.dtype not in (DType.UINT8, DType.INT8) or out.dtype not in (DType.UINT8, DType.INT8) \
            or w.dtype is not DType.INT8:
        return "qconv_depthwise takes u8/i8 inputs and outputs and int8 weights"
    if not all(view.constant[i] for i in range(1, 8)) or (len(view.operands) > 8 and view.operands[8] is not None
                                                          and not view.constant[8]):
        return "qconv_depthwise needs constant weights, scales, zero points and bias"
    channels = w.shape[0]
    for i, count in ((1, 1), (2, 1), (4, channels), (5, channels), (6, 1), (7, 1)):
        t = view.operand(i)
        if t.size not in (1, count) or (t.size > 1 and t.rank != 1) or (i in (1, 4, 6) and t.dtype != DType.FLOAT32):
            return "qconv_depthwise takes float32 per-tensor x/y parameters and per-tensor or per-channel weight ones"
    return None


def _applies(instr: Instr, options: KernelOptions) -> bool:
    w_zero = instr.operand(6)
    return is_whole_weight(w_zero) and not np.any(w_zero.constant()) and bias_fits_int32(instr)


def _layout(instr: Instr) -> dict:
    ops, _ = _roles(instr)
    d = _dims((ops[1].type, ops[4].type, ops[0].type, instr.attrs))
    d["chan_plane"] = d["phases"] * d["hph"] * d["wph"] + d["wph"]  # one channel's planes (and a row of slack)
    return d


def _per_thread(d: dict) -> int:
    """Scratch bytes per thread: the channel's planes, then its grid of int32 sums and of bytes."""
    return -(-d["chan_plane"] // 64) * 64 + -(-5 * d["oh"] * d["wph"] // 64) * 64


def _plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    d = _layout(instr)
    threads = threads_for(options.num_threads, d["n"] * d["m"] * d["oh"] * d["ow"] * d["kh"] * d["kw"] * 16)
    w = _roles(instr)[0][4]
    taps = w.constant().astype(np.int32).reshape(d["m"], d["kh"] * d["kw"])
    plan = KernelPlan({"threads": threads}, scratch_bytes=threads * _per_thread(d))
    plan.packed = [(w, "qdw_taps_i32", np.ascontiguousarray(taps))]
    plan.tables = channel_tables(instr, d)
    return plan


def emit_qconv_depthwise(em: Emitter, instr: Instr) -> str:
    d = _layout(instr)
    q = _Operands.of(instr)
    out, flip = q.out, q.flip
    if out.type.size == 0:
        return "/* empty result */"
    threads = int(param(instr, "threads", 1))
    sh, sw, kh, kw, wph, hph = d["sh"], d["sw"], d["kh"], d["kw"], d["wph"], d["hph"]
    oh, ow, h, wd = d["oh"], d["ow"], d["h"], d["w"]
    per_thread = _per_thread(d)
    grid = oh * wph
    w = CWriter().line(
        *q.declarations(em, instr, "const int32_t *taps"), *q.folded(em, instr),
        f"uint8_t *scratch = (uint8_t *){em.scratch(instr)};")
    if threads > 1:
        w.line(f"#pragma omp parallel for num_threads({threads}) schedule(static)")
    with w.block(f"for (long item = 0; item < {d['n'] * d['m']}; item++)"):
        w.line("long tid = 0;",
               "#ifdef _OPENMP",
               "tid = omp_get_thread_num();",
               "#endif",
               f"uint8_t *plane = scratch + tid * {per_thread};",
               f"int32_t *acc = (int32_t *)(plane + {-(-d['chan_plane'] // 64) * 64});",
               f"uint8_t *bytes = (uint8_t *)(acc + {grid});",
               f"long c = item % {d['m']};",
               f"const uint8_t *xc = x + item * {h * wd};",
               f"uint8_t *yc = y + item * {oh * ow};",
               f"const int32_t *wc = taps + c * {kh * kw};",
               f"memset(plane, xz, {d['chan_plane']});")
        # the channel's phase planes: input row ih lands in phase (ph % sh, .), plane row ph / sh
        with w.block(f"for (long ih = 0; ih < {h}; ih++)"):
            w.line(f"long ph = ih + {d['pt']}, a = ph % {sh}, r = ph / {sh};", f"if (r >= {hph}) continue;")
            with w.block(f"for (long b = 0; b < {sw}; b++)"):
                w.line(f"long iw0 = ((b - {d['pl']}) % {sw} + {sw}) % {sw}, col0 = (iw0 + {d['pl']}) / {sw};",
                       f"long n = iw0 < {wd} ? ({wd} - iw0 + {sw} - 1) / {sw} : 0;",
                       f"if (col0 + n > {wph}) n = {wph} - col0 > 0 ? {wph} - col0 : 0;",
                       f"uint8_t *dst = plane + ((a * {sw} + b) * {hph} + r) * {wph} + col0;",
                       f"const uint8_t *src = xc + ih * {wd} + iw0;",
                       f"for (long j = 0; j < n; j++) dst[j] = (uint8_t)(src[j * {sw}] ^ {flip});")
        # the whole output on the grid of wph columns per row: each tap one contiguous loop
        w.line("const int32_t cc = corr[c]; const double mc = mult[c];",
               f"for (long q = 0; q < {grid}; q++) acc[q] = cc;")
        for u in range(kh):
            for v in range(kw):
                at = ((u % sh) * sw + v % sw) * hph * wph + (u // sh) * wph + v // sw
                w.line(f"{{ const uint8_t *s = plane + {at}; const int32_t t = wc[{u * kw + v}]; "
                       f"for (long q = 0; q < {grid}; q++) acc[q] += (int32_t)s[q] * t; }}")
        w.line(f"for (long q = 0; q < {grid}; q++) {{ double r = (double)acc[q] * mc; "
               "r = r > lo ? r : lo; r = r < hi ? r : hi; bytes[q] = (uint8_t)((int32_t)nearbyint(r) + zy); }",
               f"for (long oy = 0; oy < {oh}; oy++) memcpy(yc + oy * {ow}, bytes + oy * {wph}, {ow});")
    return w.text()


C_KERNELS.add(Kernel("qconv_depthwise", ("QLinearConv",), emit_qconv_depthwise, accepts=_accepts, applies=_applies,
                     plan=_plan), first=True)

__all__ = ["emit_qconv_depthwise"]
