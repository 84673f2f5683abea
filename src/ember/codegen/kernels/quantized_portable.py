"""Portable int8 kernels for MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv: what
AOT bundles for CPUs other than x86 (Cortex-M4/M7, aarch64, riscv64) run in place of the x86
integer GEMM of quantized.py, whose packed panels (64 columns, for vpdpbusd) and float64
requantization suit a desktop core, not a microcontroller's flash and FPU.

Here the weights are stored once, as int8 rows (one per output column or channel, K rounded
up to 4: a quantized model's weights take a quarter of the float bundle's flash), the main
loop is integer only (SMLAD on Armv7E-M), the scratch is one int16 row of K and its dot
products, and QLinear* requantize with a fixed-point multiplier that reproduces the
interpreter's float64 rounding bit for bit (qportable_core.py says how, and why a float64
product remains for near ties). Depthwise convolutions run direct, pointwise ones gather
their pixel's channels; the rest take one output pixel's im2col row at a time.

`portable_kernels()` is the registry the bundle backend for those targets selects from:
C_KERNELS with these kernels tried first. Where one refuses (B or the scales known only at
run time, a per-row A scale, scales that are not float32, a convolution that is not 2-D),
the x86 kernel's portable C path runs instead; the LIR and the generated C name the kernel
each instruction got (`kernel qgemm_portable`). Imports the kernel registry, emitter, lir,
ops and types."""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import cache

import numpy as np

from ember.codegen.c_types import c_type
from ember.codegen.c_writer import CWriter
from ember.codegen.emitter import Emitter
from ember.codegen.kernels.qportable_core import CAP_K, PQ_C, REQUANT_FIELDS, pack_rows, requant_params
from ember.codegen.kernels.registry import Kernel, KernelOptions, KernelPlan, KernelRegistry, OpView
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Buffer, Instr
from ember.types import DType, TensorType

BYTES = (DType.INT8, DType.UINT8)
DEPTHWISE_TAPS = 64  # depthwise windows up to this many taps run direct, their weights in a local array


@dataclass
class _Roles:
    """An integer op's operands by role (None where absent), for types or buffers alike."""

    out: object
    a: object
    b: object
    za: object = None
    zb: object = None
    sa: object = None
    sb: object = None
    sy: object = None
    zy: object = None
    bias: object = None

    @property
    def quantized(self) -> bool:
        return self.sy is not None

    @classmethod
    def of(cls, op: str, items: list) -> _Roles:
        """`items`: result then operands, in the op's order."""
        items = list(items) + [None] * (10 - len(items))
        if op in ("MatMulInteger", "ConvInteger"):
            return cls(items[0], items[1], items[2], za=items[3], zb=items[4])
        out, a, sa, za, b, sb, zb, sy, zy, bias = items[:10]
        return cls(out, a, b, za=za, zb=zb, sa=sa, sb=sb, sy=sy, zy=zy, bias=bias)


def _type(t: object) -> TensorType | None:
    return t.type if isinstance(t, Buffer) else t  # type: ignore[return-value]


def _matrix_dims(a: TensorType, b: TensorType) -> tuple[int, int, int, int]:
    """(rows of A folded over its batch, rows of one matrix M, K, N) for B [K, N]."""
    k, n = b.shape
    m = a.shape[-2] if a.rank >= 2 else 1
    return math.prod(a.shape[:-1]), m, k, n


def _check_common(view: OpView, roles: _Roles, rows: int, cols: int) -> str | None:
    for what, t in (("A", roles.a), ("B", roles.b)):
        tt = _type(t)
        if tt is None or tt.dtype not in BYTES:
            return f"{view.op} {what} of type {tt.dtype if tt else None} has no portable int8 kernel"
    out = _type(roles.out)
    if roles.quantized and (out is None or out.dtype not in BYTES):
        return f"{view.op} output of type {out.dtype if out else None} has no portable int8 kernel"
    for t in (roles.sa, roles.sb, roles.sy):
        tt = _type(t)
        if tt is not None and tt.dtype is not DType.FLOAT32:
            return f"{view.op} with {tt.dtype} scales has no portable int8 kernel (float32 only)"
    for what, t, per in (("A zero point", roles.za, rows), ("B zero point", roles.zb, cols), ("A scale", roles.sa, 1),
                         ("B scale", roles.sb, cols), ("output scale", roles.sy, cols),
                         ("output zero point", roles.zy, cols)):
        tt = _type(t)
        if tt is not None and tt.size not in (1, per):
            return (f"{view.op} {what} of shape {list(tt.shape)}: the portable int8 kernel takes it per tensor"
                    + (f" or per {per}" if per > 1 else ""))
    return None


def _constants(view: OpView) -> dict[str, bool]:
    names = ("a", "b", "za", "zb") if view.op in ("MatMulInteger", "ConvInteger") else \
        ("a", "sa", "za", "b", "sb", "zb", "sy", "zy", "bias")
    return {name: view.constant[i] if i < len(view.constant) else False for i, name in enumerate(names)}


def _needs_constants(view: OpView, roles: _Roles) -> str | None:
    known = _constants(view)
    if not known["b"]:
        return f"{view.op}: the portable int8 kernel packs B at compile time; this B is known only at run time"
    if roles.quantized and not all(known[s] for s in ("sa", "sb", "sy")):
        return f"{view.op}: the portable int8 kernel needs constant scales (it precomputes the requantization)"
    return None


def _accepts_matmul(view: OpView) -> str | None:
    roles = _Roles.of(view.op, [view.results[0], *view.operands])
    a, b = _type(roles.a), _type(roles.b)
    assert a is not None and b is not None
    if b.rank != 2 or a.rank < 1:
        return f"{view.op} with B of rank {b.rank}: the portable int8 kernel takes a 2-D B"
    _, m, k, n = _matrix_dims(a, b)
    if k > CAP_K:
        return f"{view.op} with K = {k} > {CAP_K} could overflow its int32 accumulators"
    return _check_common(view, roles, m, n) or _needs_constants(view, roles)


def _accepts_conv(view: OpView) -> str | None:
    roles = _Roles.of(view.op, [view.results[0], *view.operands])
    x, w = _type(roles.a), _type(roles.b)
    assert x is not None and w is not None
    if x.rank != 4:
        return f"only 2-D (NCHW) {view.op} has a portable int8 kernel"
    k = math.prod(w.shape[1:])
    if k > CAP_K:
        return f"{view.op} with {k} products per output > {CAP_K} could overflow its int32 accumulators"
    reason = _check_common(view, roles, 1, w.shape[0])
    if reason is None and _type(roles.sy) is not None and _type(roles.sy).size != 1:  # type: ignore[union-attr]
        return f"{view.op} output scale per channel has no portable int8 kernel"
    return reason or _needs_constants(view, roles)


def _multipliers(roles: _Roles) -> np.ndarray:
    """a_scale * b_scale / y_scale in float64, per column where any of them is, exactly as
    the interpreter computes it (ops/quant.py)."""
    scales = []
    for buffer in (roles.sa, roles.sb, roles.sy):
        assert isinstance(buffer, Buffer)
        scales.append(np.asarray(buffer.constant(), np.float64).reshape(-1))
    sa, sb, sy = scales
    return sa * sb / sy if max(sb.size, sy.size) > 1 else (sa * sb / sy)[:1]


def _table(roles: _Roles) -> tuple[str, str, np.ndarray]:
    data = requant_params(_multipliers(roles))
    key = hashlib.sha256(data.tobytes()).hexdigest()[:16]
    return key, "pq_requant", data


def _k4(k: int) -> int:
    return -(-k // 4) * 4


def _plan_matmul(instr: Instr, options: KernelOptions) -> KernelPlan:
    roles = _Roles.of(instr.name, list(instr.base_operands))
    a, b = roles.a, roles.b
    assert isinstance(a, Buffer) and isinstance(b, Buffer)
    _, _, k, n = _matrix_dims(a.type, b.type)
    plan = KernelPlan({"k4": _k4(k)}, scratch_bytes=2 * _k4(k) + 4 * n)
    plan.packed = [(b, "pq_rows", pack_rows(np.ascontiguousarray(b.constant().reshape(k, n).T)))]
    if roles.quantized:
        plan.tables = [_table(roles)]
    return plan


def _plan_conv(instr: Instr, options: KernelOptions) -> KernelPlan:
    roles = _Roles.of(instr.name, list(instr.base_operands))
    w = roles.b
    assert isinstance(w, Buffer)
    m, k = w.type.shape[0], math.prod(w.type.shape[1:])
    plan = KernelPlan({"k4": _k4(k)}, scratch_bytes=2 * _k4(k) + 4 * (m // instr.attrs.group))
    plan.packed = [(w, "pq_rows", pack_rows(w.constant().reshape(m, k)))]
    if roles.quantized:
        plan.tables = [_table(roles)]
    return plan


def _operand_pointers(em: Emitter, roles: _Roles) -> list[str]:
    lines = []
    for name in ("za", "zb", "zy", "bias", "sa", "sb", "sy"):
        buffer = getattr(roles, name)
        if isinstance(buffer, Buffer):
            lines.append(f"const {c_type(buffer.type.dtype)} *{name} = {em.pointer(buffer, const=True)}; (void){name};")
    return lines


def _param(name: str, buffer: object, index: str) -> str:
    """Parameter `name` (a per-tensor or per-`index` buffer) as int32; 0 when absent."""
    if not isinstance(buffer, Buffer):
        return "0"
    return f"(int32_t){name}[{index if buffer.type.size > 1 else '0'}]"


def _store(em: Emitter, roles: _Roles, target: str, acc: str, column: str, bias: str) -> str:
    """The statement storing one result: the int32 accumulator, or it requantized."""
    out = roles.out
    assert isinstance(out, Buffer)
    if not roles.quantized:
        return f"{target} = {acc};"
    lo, hi = (-128, 127) if out.type.dtype is DType.INT8 else (0, 255)
    sb, sy = _type(roles.sb), _type(roles.sy)
    per_column = (sb is not None and sb.size > 1) or (sy is not None and sy.size > 1)
    table = f"rq + {REQUANT_FIELDS} * {column}" if per_column else "rq"
    scales = ", ".join(_scale(name, getattr(roles, name), column) for name in ("sa", "sb", "sy"))
    return (f"{target} = ({c_type(out.type.dtype)})ember_pq_requant({acc}, {bias or '0'}, {table}, {scales}, "
            f"{_param('zy', roles.zy, column)}, {lo}, {hi});")


def _scale(name: str, buffer: object, index: str) -> str:
    """A pointer to a scale (per tensor or per `index`), for the rare float64 requantization."""
    assert isinstance(buffer, Buffer)
    return f"{name} + {index}" if buffer.type.size > 1 else name


def _prelude(em: Emitter, instr: Instr, roles: _Roles, k4: int) -> list[str]:
    """Pointers to the result, the weight rows, the scratch (the centered row, then the dot
    products), the parameters and the requantization table."""
    out = roles.out
    assert isinstance(out, Buffer)
    lines = [f"{c_type(out.type.dtype)} *restrict y = {em.pointer(out)};",
             f"const int8_t *restrict wr = (const int8_t *){em.packed(instr, 0)};",
             f"int16_t *restrict ac = (int16_t *){em.scratch(instr)};",
             f"int32_t *restrict dots = (int32_t *)(ac + {k4});",
             *_operand_pointers(em, roles)]
    if roles.quantized:
        lines.append(f"const int32_t *rq = {em.table(instr, 0)};")
    return lines


def _beta(roles: _Roles, column: str) -> str:
    """zb - flip for one column: B's zero point in the int8 rows' terms."""
    b = roles.b
    assert isinstance(b, Buffer)
    flip = 128 if b.type.dtype is DType.UINT8 else 0
    return f"{_param('zb', roles.zb, column)} - {flip}"


def emit_matmul(em: Emitter, instr: Instr) -> str:
    roles = _Roles.of(instr.name, list(instr.base_operands))
    a, b, out = roles.a, roles.b, roles.out
    assert isinstance(a, Buffer) and isinstance(b, Buffer) and isinstance(out, Buffer)
    rows, m, k, n = _matrix_dims(a.type, b.type)
    if out.type.size == 0:
        return "/* empty result */"
    k4 = _k4(k)
    za_row = f"i % {m}" if m > 1 else "0"
    signed = int(a.type.dtype is DType.INT8)
    w = CWriter().line(f"const uint8_t *restrict xa = {em.address(a)};", *_prelude(em, instr, roles, k4))
    with w.block(f"for (long i = 0; i < {rows}; i++)"):
        w.line(f"int32_t asum = ember_pq_center(xa + i * {k}, 1, {k}, {k4}, {signed}, "
               f"{_param('za', roles.za, za_row)}, ac);",
               f"ember_pq_dots(ac, wr, {k4}, {n}, dots);")
        with w.block(f"for (long j = 0; j < {n}; j++)"):
            w.line(f"int32_t acc = ember_pq_acc(dots[j], {_beta(roles, 'j')}, asum);",
                   _store(em, roles, f"y[i * {n} + j]", "acc", "j", ""))
    return w.text()


def emit_conv(em: Emitter, instr: Instr) -> str:
    roles = _Roles.of(instr.name, list(instr.base_operands))
    x, wt, out = roles.a, roles.b, roles.out
    assert isinstance(x, Buffer) and isinstance(wt, Buffer) and isinstance(out, Buffer)
    if out.type.size == 0:
        return "/* empty result */"
    attrs = instr.attrs
    batch, channels, height, width = x.type.shape
    out_channels, cg, kh, kw = wt.type.shape
    groups = attrs.group
    mg = out_channels // groups
    oh, ow = out.type.shape[2:]
    k = cg * kh * kw
    k4 = _k4(k)
    (sh, sw), (dh, dw) = attrs.strides, attrs.dilations
    pt, pl = attrs.pads[0], attrs.pads[1]
    xt = c_type(x.type.dtype)
    bias = _param('bias', roles.bias, 'oc') if isinstance(roles.bias, Buffer) else ""
    w = CWriter().line(f"const {xt} *restrict x = {em.pointer(x, const=True)};", *_prelude(em, instr, roles, k4),
                       f"const int32_t xz = {_param('za', roles.za, '0')};")
    store = _store(em, roles, f"y[(nb * {out_channels} + oc) * {oh * ow} + p]", "acc", "oc", bias)
    inside = f"ih >= 0 && ih < {height} && iw >= 0 && iw < {width}"
    w.line(f"for (long nb = 0; nb < {batch}; nb++)")
    if cg == 1 and mg == 1 and kh * kw <= DEPTHWISE_TAPS:
        # Depthwise: each output is its channel's taps against kh*kw centered weights, direct;
        # a window wholly inside the image reads without checks, as sum x*w - xz * sum w.
        with w.block(f"for (long oc = 0; oc < {groups}; oc++)"):
            w.line(f"const {xt} *xg = x + (nb * {channels} + oc) * {height * width};",
                   f"const int8_t *wg = wr + oc * {k4};",
                   f"int32_t wc[{kh * kw}], beta = {_beta(roles, 'oc')}, wsum = 0;",
                   # tap t sits at (t & ~3) | swap of its two low bits in the SXTB16 order
                   f"for (int t = 0; t < {kh * kw}; t++) {{ wc[t] = (int32_t)wg[(t & ~3) | ((t & 1) << 1) | "
                   "((t >> 1) & 1)] - beta; wsum += wc[t]; }")
            with w.block(f"for (long oy = 0, p = 0; oy < {oh}; oy++)"):
                w.line(f"long iy = oy * {sh} - {pt};")
                with w.block(f"for (long ox = 0; ox < {ow}; ox++, p++)"):
                    w.line(f"long ix = ox * {sw} - {pl};", "int32_t acc = 0;")
                    with w.block(f"if (iy >= 0 && iy + {(kh - 1) * dh} < {height} && ix >= 0 && "
                                 f"ix + {(kw - 1) * dw} < {width})"):
                        w.line(f"const {xt} *xp = xg + iy * {width} + ix;",
                               f"for (int u = 0; u < {kh}; u++) for (int v = 0; v < {kw}; v++) "
                               f"acc += (int32_t)xp[u * {dh * width} + v * {dw}] * wc[u * {kw} + v];",
                               "acc -= xz * wsum;")
                    with w.block("else"):
                        w.line(f"for (long u = 0; u < {kh}; u++) {{",
                               f"    long ih = iy + u * {dh};",
                               f"    for (long v = 0; v < {kw}; v++) {{",
                               f"        long iw = ix + v * {dw};",
                               f"        if ({inside})",
                               f"            acc += ((int32_t)xg[ih * {width} + iw] - xz) * wc[u * {kw} + v];",
                               "    }",
                               "}")
                    w.line(store)
        return w.text()
    with w.block(f"for (long g = 0; g < {groups}; g++)"):
        w.line(f"const {xt} *xg = x + (nb * {channels} + g * {cg}) * {height * width};")
        with w.block(f"for (long p = 0; p < {oh * ow}; p++)"):
            # One output pixel's taps, centered by the zero point (padding reads it: 0).
            if kh == kw == 1 and (sh, sw) == (1, 1) and not any(attrs.pads):
                w.line("int32_t asum = 0;",
                       f"for (long c = 0; c < {cg}; c++) {{ int32_t t = (int32_t)xg[c * {height * width} + p] - xz; "
                       "ac[c] = (int16_t)t; asum += t; }",
                       f"for (long kk = {cg}; kk < {k4}; kk++) ac[kk] = 0;")
            else:
                w.line(f"long oy = p / {ow}, ox = p % {ow}, kk = 0;", "int32_t asum = 0;",
                       f"for (long c = 0; c < {cg}; c++) for (long u = 0; u < {kh}; u++) {{",
                       f"    long ih = oy * {sh} - {pt} + u * {dh};",
                       f"    for (long v = 0; v < {kw}; v++, kk++) {{",
                       f"        long iw = ox * {sw} - {pl} + v * {dw};",
                       f"        int32_t t = {inside} ? (int32_t)xg[(c * {height} + ih) * {width} + iw] - xz : 0;",
                       "        ac[kk] = (int16_t)t;",
                       "        asum += t;",
                       "    }",
                       "}",
                       f"for (; kk < {k4}; kk++) ac[kk] = 0;")
            w.line(f"ember_pq_dots(ac, wr + g * {mg * k4}, {k4}, {mg}, dots);")
            with w.block(f"for (long j = 0; j < {mg}; j++)"):
                w.line(f"long oc = g * {mg} + j;", f"int32_t acc = ember_pq_acc(dots[j], {_beta(roles, 'oc')}, asum);",
                       store)
    return w.text()


PORTABLE_INT8 = (
    Kernel("qgemm_portable", ("MatMulInteger", "QLinearMatMul"), emit_matmul, accepts=_accepts_matmul,
           plan=_plan_matmul, preamble=PQ_C),
    Kernel("qconv_portable", ("ConvInteger", "QLinearConv"), emit_conv, accepts=_accepts_conv, plan=_plan_conv,
           preamble=PQ_C),
)


@cache
def portable_kernels() -> KernelRegistry:
    """C_KERNELS with the portable int8 kernels tried first (built on first use, once every
    kernel family has registered into C_KERNELS)."""
    import ember.codegen.kernels  # noqa: F401  (registers every family)

    registry = C_KERNELS.derive("C portable")
    for kernel in PORTABLE_INT8:
        registry.add(kernel, first=True)
    return registry
