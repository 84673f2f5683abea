"""Integer kernels for the explicit quantization ops: QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv.

Quantizing divides in the interpreter's type (the input's float type, float32 for int32
input), rounds with nearbyint (half to even in the default rounding mode) and saturates;
the clamp is written with selects so a NaN lands on the low bound instead of reaching an
undefined float-to-int conversion. Per-tensor, per-axis and blocked parameters share one
loop nest whose innermost axis runs contiguously in x, y and (blocked) the parameters.

The integer GEMM (qgemm_core.py: its C is these kernels' preamble) computes
sum_k (a - za)(b - zb) as A_u . B_s with A_u = A as uint8 (int8 A flipped by +128) and B_s = B as int8 (uint8 B
flipped by -128): exactly what AVX-512 VNNI's vpdpbusd multiplies (a portable loop
elsewhere). The zero points and flips fold into per-row / per-column corrections:
    sum_k (A_u - alpha_i)(B_s - beta_j) = P_ij - beta_j R_i + alpha_i (K beta_j - S_j)
with R the row sums of A_u and S the column sums of B_s, done in wrapping uint32 (the true
value fits int32: K is capped by CAP_K). B is packed into 64-column panels of 4-deep k
groups (`pack_qpanels`, mirrored by ember_qpack in C for B known only at run time).
Convolutions run as Y^T = im2col(X)^T W^T per image and group, stored transposed into NCHW."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ember.codegen.c_types import NARROW_FLOATS, NARROW_INTS, c_type, libm
from ember.codegen.c_writer import CWriter
from ember.codegen.emitter import Emitter, param, threads_pragma
from ember.codegen.kernels.gemm import _batch_offsets
from ember.codegen.kernels.layouts import threads_for
from ember.codegen.kernels.qgemm_core import QGEMM_C, pack_qpanels, qpanel_bytes
from ember.codegen.kernels.registry import KernelOptions, KernelPlan, OpView, is_whole_weight
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Buffer, Instr
from ember.ops.shape_util import normalize_axis
from ember.types import DType, TensorType

INT_Q = (DType.INT8, DType.UINT8, DType.INT16, DType.UINT16)  # QuantizeLinear outputs with kernels
DEQ_IN = INT_Q + (DType.INT32,)
REALS = (DType.FLOAT32, DType.FLOAT64)
BYTES = (DType.INT8, DType.UINT8)
CAP_K = 33025  # 33025 * 255 * 255 < 2**31: every exact result fits int32


def _name(dtype: DType) -> str:
    return dtype.name.lower()


def _bounds(dtype: DType) -> tuple[int, int]:
    info = ml_dtypes.iinfo(dtype.numpy)
    return int(info.min), int(info.max)


# The stored-only types the linear kernels convert on the fly (runtime/ember_math.h).
HALVES = {DType.FLOAT16: ("ember_f16_to_f32", "ember_f32_to_f16"),
          DType.BFLOAT16: ("ember_bf16_to_f32", "ember_f32_to_bf16")}
NARROW_Q = tuple(NARROW_FLOATS) + tuple(NARROW_INTS)


def _load(dtype: DType, expr: str) -> str:
    """`expr` (an element of `dtype`) as a float, or as an integer for the integer types."""
    if dtype in HALVES:
        return f"{HALVES[dtype][0]}({expr})"
    if dtype in NARROW_FLOATS:
        e, m, bias, kind = NARROW_FLOATS[dtype]
        return f"ember_narrow_to_f32({expr}, {e}, {m}, {bias}, {kind})"
    if dtype in NARROW_INTS:
        bits, signed = NARROW_INTS[dtype]
        return f"((int8_t)(uint8_t)({expr} << {8 - bits}) >> {8 - bits})" if signed else f"({expr} & {(1 << bits) - 1})"
    return f"(float){expr}"


# QuantizeLinear / DequantizeLinear ---------------------------------------------------------


def _accepts_quantize(view: OpView) -> str | None:
    x, to = view.operand(0), view.results[0].dtype
    if to not in INT_Q + NARROW_Q:
        return f"QuantizeLinear to {_name(to)} has no C kernel"
    if x.dtype not in REALS + (DType.INT32,):
        return f"QuantizeLinear from {_name(x.dtype)} has no C kernel"
    if view.operand(1).dtype not in REALS:
        return f"QuantizeLinear with a {_name(view.operand(1).dtype)} scale has no C kernel"
    return None


def _accepts_dequantize(view: OpView) -> str | None:
    x, to = view.operand(0), view.results[0].dtype
    if x.dtype not in DEQ_IN + NARROW_Q:
        return f"DequantizeLinear from {_name(x.dtype)} has no C kernel"
    if to not in REALS + tuple(HALVES):
        return f"DequantizeLinear to {_name(to)} has no C kernel"
    if view.operand(1).dtype not in REALS + tuple(HALVES):
        return f"DequantizeLinear with a {_name(view.operand(1).dtype)} scale has no C kernel"
    return None


def _plan_elementwise(instr: Instr, options: KernelOptions) -> KernelPlan:
    return KernelPlan({"threads": threads_for(options.num_threads, instr.operand(1).type.size * 8)})


def _param_index(x: TensorType, p: Buffer | None, attrs) -> tuple[str, int, int, int]:
    """(index expression over o/i/j, outer, axis length, inner) for a parameter of x: a
    per-tensor one runs x as one flat loop."""
    shape = x.shape
    if p is None or p.type.size == 1 and not attrs.block_size or not shape:
        return "0", 1, x.size, 1
    axis = normalize_axis(attrs.axis, len(shape))
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    if attrs.block_size:
        blocks = -(-n // attrs.block_size)
        return f"(o * {blocks} + i / {attrs.block_size}) * {inner} + j", outer, n, inner
    return "i", outer, n, inner


def _linear_loops(em: Emitter, instr: Instr, body: str) -> str:
    """y[e] = body over x's axis split (o, i, j); `body` reads x[e], sp[p] and zp[pz]."""
    out, x, scale, zero = instr.base_operands[:4]
    assert out is not None and x is not None and scale is not None
    index, outer, n, inner = _param_index(x.type, scale, instr.attrs)
    zindex = _param_index(x.type, zero, instr.attrs)[0]
    if index == "0" and zindex != "0":  # a size-1 scale beside a per-axis zero point
        _, outer, n, inner = _param_index(x.type, zero, instr.attrs)
    zt = c_type(zero.type.dtype) if zero is not None else "int32_t"
    lines = [f"{c_type(out.type.dtype)} *restrict y = {em.pointer(out)};",
             f"const {c_type(x.type.dtype)} *restrict x = {em.pointer(x, const=True)};",
             f"const {c_type(scale.type.dtype)} *restrict sp = {em.pointer(scale, const=True)};",
             f"const {zt} *restrict zp = {em.pointer(zero, const=True) if zero is not None else 'NULL'};",
             "(void)zp;"]
    if x.type.size == 0:
        return "/* empty tensor */"
    pragma = [f"#pragma omp parallel for {threads_pragma(instr)} schedule(static)"] \
        if int(param(instr, "threads", 1)) > 1 else []
    w = CWriter().line(*lines)
    # Threads split the outer loop, or the axis loop when there is no outer one.
    w.line(*pragma if outer > 1 else [], f"for (long o = 0; o < {outer}; o++) {{")
    w.line(*pragma if outer == 1 else [], f"for (long i = 0; i < {n}; i++)")
    with w.block(f"for (long j = 0; j < {inner}; j++)"):
        w.line(f"long e = (o * {n} + i) * {inner} + j, p = {index}, pz = {zindex}; (void)p; (void)pz;", body)
    w.line("}")
    return w.text()


@C_KERNELS.kernel("quantize_linear", "QuantizeLinear", accepts=_accepts_quantize, plan=_plan_elementwise)
def emit_quantize(em: Emitter, instr: Instr) -> str:
    out, x, _, zero = instr.base_operands[:4]
    assert out is not None and x is not None
    ct = DType.FLOAT64 if x.type.dtype is DType.FLOAT64 else DType.FLOAT32  # the interpreter's division type
    t, to = c_type(ct), out.type.dtype
    if to in NARROW_FLOATS:  # no rounding to integers: the scaled value converts (saturating where asked)
        e, m, bias, kind = NARROW_FLOATS[to]
        z = f" + {_load(to, 'zp[pz]')}" if zero is not None and to is DType.FLOAT4E2M1 else ""
        saturate = int(instr.attrs.saturate and to is not DType.FLOAT4E2M1)
        body = (f"float q = (float)(({t})x[e] / ({t})sp[p]){z}; "
                f"y[e] = ember_f32_to_narrow(q, {e}, {m}, {bias}, {kind}, {saturate});")
        return _linear_loops(em, instr, body)
    lo, hi = _bounds(to)
    z = f" + ({t}){_load(to, 'zp[pz]')}" if zero is not None else ""
    store = f"(uint8_t)((int)q & {(1 << NARROW_INTS[to][0]) - 1})" if to in NARROW_INTS else f"({c_type(to)})q"
    body = (f"{t} q = {libm('nearbyint', ct)}(({t})x[e] / ({t})sp[p]){z}; "
            f"q = q != q ? 0 : q; q = q > {lo} ? q : {lo}; q = q < {hi} ? q : {hi}; y[e] = {store};")
    return _linear_loops(em, instr, body)


@C_KERNELS.kernel("dequantize_linear", "DequantizeLinear", accepts=_accepts_dequantize, plan=_plan_elementwise)
def emit_dequantize(em: Emitter, instr: Instr) -> str:
    out, x, scale, zero = instr.base_operands[:4]
    assert out is not None and x is not None and scale is not None
    dt = x.type.dtype
    # A float8 zero point does not shift (the reference ignores it); float4's neither.
    z = f" - {_load(dt, 'zp[pz]')}" if zero is not None and dt not in NARROW_FLOATS else ""
    value = f"(((float){_load(dt, 'x[e]')}{z}) * {_load(scale.type.dtype, 'sp[p]')})"
    to = out.type.dtype
    store = f"{HALVES[to][1]}({value})" if to in HALVES else f"({c_type(to)}){value}"
    return _linear_loops(em, instr, f"y[e] = {store};")


def _accepts_dynamic(view: OpView) -> str | None:
    t = view.operand(0).dtype
    return None if t is DType.FLOAT32 else f"DynamicQuantizeLinear from {_name(t)} has no C kernel"


@C_KERNELS.kernel("dynamic_quantize_linear", "DynamicQuantizeLinear", accepts=_accepts_dynamic)
def emit_dynamic_quantize(em: Emitter, instr: Instr) -> str:
    """The interpreter's float32 arithmetic step by step: the range always holds 0, and a NaN
    anywhere makes it [0, 0] (np.max propagates NaN, Python's max(0.0, nan) drops it)."""
    y, scale, zero, x = instr.required()
    size = x.type.size
    return "\n".join([
        f"const float *restrict x = {em.pointer(x, const=True)};",
        f"uint8_t *restrict y = {em.pointer(y)};",
        "float lo = 0.0f, hi = 0.0f; int nan = 0;",
        f"for (long i = 0; i < {size}; i++) {{",
        "    float v = x[i]; nan |= v != v; lo = v < lo ? v : lo; hi = v > hi ? v : hi;",
        "}",
        "if (nan) { lo = 0.0f; hi = 0.0f; }",
        "float s = (hi != lo ? hi - lo : 1.0f) / 255.0f;",
        "float z = 0.0f - lo / s; z = z > 0.0f ? z : 0.0f; z = z < 255.0f ? z : 255.0f; z = nearbyintf(z);",
        f"*{em.pointer(scale)} = s;",
        f"*{em.pointer(zero)} = (uint8_t)z;",
        f"for (long i = 0; i < {size}; i++) {{",
        "    float q = nearbyintf(x[i] / s) + z; q = q > 0.0f ? q : 0.0f; q = q < 255.0f ? q : 255.0f;",
        "    y[i] = (uint8_t)q;",
        "}",
    ])


class _Scratch:
    """Named regions of one scratch buffer, each 64-byte aligned."""

    def __init__(self) -> None:
        self.regions: list[tuple[str, str, int]] = []
        self.bytes = 0

    def add(self, name: str, ctype: str, nbytes: int) -> _Scratch:
        self.regions.append((name, ctype, self.bytes))
        self.bytes += -(-max(nbytes, 1) // 64) * 64
        return self

    def declare(self, em: Emitter, instr: Instr) -> list[str]:
        base = f"((uint8_t *){em.scratch(instr)})"
        return [f"{t} *{name} = ({t} *)({base} + {off});" for name, t, off in self.regions]


class _QOperands:
    """The operands of an integer GEMM op, by role (None where absent)."""

    def __init__(self, op: str, ops: list) -> None:
        if op in ("MatMulInteger", "ConvInteger"):
            self.out, self.a, self.b, self.za, self.zb = ops[:5]
            self.sa = self.sb = self.sy = self.zy = self.bias = None
        elif op == "QLinearMatMul":
            self.out, self.a, self.sa, self.za, self.b, self.sb, self.zb, self.sy, self.zy = ops[:9]
            self.bias = None
        else:  # QLinearConv
            self.out, self.a, self.sa, self.za, self.b, self.sb, self.zb, self.sy, self.zy = ops[:9]
            self.bias = ops[9] if len(ops) > 9 else None
        self.quantized = op.startswith("QLinear")


def _flip(t: TensorType, unsigned_side: bool) -> int:
    """The xor turning an A element into uint8 (unsigned_side) or a B element into int8."""
    return 0x80 if (t.dtype is DType.INT8) == unsigned_side else 0


def _check_params(view: OpView, q: _QOperands, rows: int, cols: int) -> str | None:
    """Zero points and scales: per tensor, per row of A (rows) or per column of B (cols)."""
    for what, t, per in (("A zero point", q.za, rows), ("B zero point", q.zb, cols), ("A scale", q.sa, rows),
                         ("B scale", q.sb, cols), ("output scale", q.sy, 1), ("output zero point", q.zy, 1)):
        if t is None:
            continue
        if t.size != 1 and (t.rank != 1 or t.size != per):
            return f"{view.op} {what} of shape {list(t.shape)} has no C kernel (per tensor or per {per} only)"
        if what.endswith("scale") and t.dtype is not DType.FLOAT32:
            return f"{view.op} with {_name(t.dtype)} scales has no C kernel"
    for what, t in (("A", q.a), ("B", q.b), ("output", q.out if q.quantized else None)):
        if t is not None and t.dtype not in BYTES:
            return f"{view.op} {what} of type {_name(t.dtype)} has no C kernel"
    return None


def _col_prep(q: _QOperands, em: Emitter, n: int, k: int, zb_at: str, colsum: str) -> list[str]:
    """beta[j] = zb - (B flip) and g[j] = K beta - S_j for the n columns (zb_at: index of
    column j's zero point)."""
    assert q.b is not None
    zb = f"(int32_t)zb[{zb_at}]" if q.zb is not None else "0"
    return [f"for (long j = 0; j < {n}; j++) {{ beta[j] = {zb} - {_flip(q.b.type, False)}; "
            f"g[j] = {k} * beta[j] - {colsum}[j]; }}"]


def _pointers(q: _QOperands, em: Emitter) -> list[str]:
    lines = []
    for name, buffer in (("za", q.za), ("zb", q.zb), ("sa", q.sa), ("sb", q.sb), ("sy", q.sy), ("zy", q.zy),
                         ("bias", q.bias)):
        if buffer is not None:
            lines.append(f"const {c_type(buffer.type.dtype)} *{name} = {em.pointer(buffer, const=True)};")
    return lines


def _qout(q: _QOperands, c: str, c_rs: str, c_cs: str, per_row_scale: bool, bias: str = "NULL",
          b_scale: str = "sb") -> str:
    assert q.out is not None
    if not q.quantized:
        return f"ember_qout o = {{ .kind = 0, .c = {c}, .c_rs = {c_rs}, .c_cs = {c_cs} }};"
    assert q.sb is not None
    kind = 1 if q.out.type.dtype is DType.UINT8 else 2
    b_step = 1 if q.sb.type.size > 1 else 0
    return (f"ember_qout o = {{ .kind = {kind}, .c = {c}, .c_rs = {c_rs}, .c_cs = {c_cs}, .bias = {bias}, "
            f".a_scale = {'sa' if per_row_scale else 'NULL'}, .b_scale = {b_scale}, .b_step = {b_step}, "
            f".y_scale = (double)sy[0], .y_zero = (double)zy[0], .mcol = mcol }};")


def _mcol(q: _QOperands, n: int, first: str = "0") -> list[str]:
    """Per-column multipliers a_scale * b_scale / y_scale, as the interpreter divides."""
    if not q.quantized:
        return []
    assert q.sb is not None
    at = f"({first} + j)" if q.sb.type.size > 1 else "0"
    return [f"for (long j = 0; j < {n}; j++) mcol[j] = (double)sa[0] * (double)sb[{at}] / (double)sy[0];"]


# MatMulInteger, QLinearMatMul --------------------------------------------------------------


def _mm_dims(a: TensorType, b: TensorType) -> tuple[tuple[int, ...], tuple[int, ...], int, int, int]:
    a_shape = (1,) + a.shape if a.rank == 1 else a.shape
    b_shape = b.shape + (1,) if b.rank == 1 else b.shape
    return a_shape, b_shape, a_shape[-2], a_shape[-1], b_shape[-1]


def _accepts_matmul(view: OpView) -> str | None:
    q = _QOperands(view.op, [view.results[0], *view.operands])
    assert q.a is not None and q.b is not None
    _, _, m, k, n = _mm_dims(q.a, q.b)
    if k > CAP_K:
        return f"{view.op} with K = {k} > {CAP_K} could overflow its int32 accumulators: no C kernel"
    return _check_params(view, q, m, n)


def _mm_layout(instr: Instr) -> dict:
    q = _QOperands(instr.name, list(instr.base_operands))
    assert q.a is not None and q.b is not None
    a_shape, b_shape, m, k, n = _mm_dims(q.a.type, q.b.type)
    per_row = any(t is not None and t.type.size > 1 for t in (q.za, q.sa))
    shared_b = len(b_shape) == 2
    fold = shared_b and not per_row  # A's batch folds into the rows when B and A's params are shared
    batch = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    rows = math.prod(a_shape[:-1]) if fold else m
    return {"q": q, "a_shape": a_shape, "b_shape": b_shape, "m": m, "k": k, "n": n, "per_row": per_row,
            "shared_b": shared_b, "fold": fold, "batch": batch, "rows": rows,
            "count": 1 if fold else math.prod(batch)}


def _mm_scratch(lay: dict, packed: bool) -> _Scratch:
    rows, n, k = lay["rows"], lay["n"], lay["k"]
    s = _Scratch().add("rowsum", "int32_t", 4 * rows).add("alpha", "int32_t", 4 * rows)
    s.add("beta", "int32_t", 4 * n).add("g", "int32_t", 4 * n).add("mcol", "double", 8 * n)
    if not packed:
        s.add("bpk", "int8_t", qpanel_bytes(k, n)).add("csum", "int32_t", 4 * n)
    if lay["q"].a.type.dtype is DType.INT8:
        s.add("acopy", "uint8_t", rows * k)  # A_u: int8 A flipped to uint8 once, not in every tile
    return s


def _plan_matmul(instr: Instr, options: KernelOptions) -> KernelPlan:
    lay = _mm_layout(instr)
    q = lay["q"]
    packed = lay["shared_b"] and is_whole_weight(q.b)
    threads = threads_for(options.num_threads, lay["rows"] * lay["n"] * lay["k"])
    plan = KernelPlan({"threads": threads, "packed": packed}, scratch_bytes=_mm_scratch(lay, packed).bytes)
    if packed:
        panels, colsum = pack_qpanels(q.b.constant().reshape(lay["k"], lay["n"]))
        plan.packed = [(q.b, "qpanels64", panels), (q.b, "qcolsum", colsum)]
    return plan


@C_KERNELS.kernel("qgemm", "MatMulInteger", "QLinearMatMul", accepts=_accepts_matmul, plan=_plan_matmul,
                  preamble=QGEMM_C)
def emit_qmatmul(em: Emitter, instr: Instr) -> str:
    lay = _mm_layout(instr)
    q: _QOperands = lay["q"]
    assert q.a is not None and q.b is not None and q.out is not None
    m, k, n, rows = lay["m"], lay["k"], lay["n"], lay["rows"]
    packed = bool(param(instr, "packed"))
    if q.out.type.size == 0:
        return "/* empty result */"
    w = CWriter().line(
        f"const uint8_t *xa = {em.address(q.a)};",
        f"const uint8_t *xb = {'NULL' if packed else em.address(q.b)}; (void)xb;",  # packed B: only its copy is stored
        f"uint8_t *y = {em.address(q.out)};", *_pointers(q, em), *_mm_scratch(lay, packed).declare(em, instr))
    flip_a, flip_b = _flip(q.a.type, True), _flip(q.b.type, False)
    za = "(int32_t)za[i]" if q.za is not None and q.za.type.size > 1 else "(int32_t)za[0]" if q.za else "0"
    w.line(f"for (long i = 0; i < {rows}; i++) alpha[i] = {flip_a} + {za};")
    if packed:
        w.line(f"const int8_t *bp = (const int8_t *){em.packed(instr, 0)};",
               f"const int32_t *colsum = (const int32_t *){em.packed(instr, 1)};")
    else:
        w.line("const int8_t *bp = bpk; const int32_t *colsum = csum;")
    zb_at = "j" if q.zb is not None and q.zb.type.size > 1 else "0"
    if lay["fold"] or lay["shared_b"]:
        if not packed:
            w.line(f"ember_qpack({k}, {n}, xb, {n}, 1, {flip_b}, bpk, csum);")
        w.line(*_col_prep(q, em, n, k, zb_at, "colsum"))
    if not lay["per_row"]:
        w.line(*_mcol(q, n))
    batch = lay["batch"]
    itemsize = q.out.type.dtype.itemsize
    with w.block(f"for (long bi = 0; bi < {lay['count']}; bi++)"):
        a_off = "0" if lay["fold"] else _batch_offsets(lay["a_shape"], batch, m * k)
        w.line(f"const uint8_t *pa = xa + {a_off};")
        if not lay["shared_b"]:
            w.line(f"const uint8_t *pb = xb + {_batch_offsets(lay['b_shape'], batch, k * n)};",
                   f"ember_qpack({k}, {n}, pb, {n}, 1, {flip_b}, bpk, csum);", *_col_prep(q, em, n, k, zb_at, "colsum"))
        au = "acopy" if flip_a else "pa"
        w.line(f"ember_qrows({rows}, {k}, pa, {k}, {flip_a}, rowsum, {'acopy' if flip_a else 'NULL'});",
               _qout(q, f"y + bi * {rows * n * itemsize}", str(n), "1", lay["per_row"]),
               f"ember_qgemm({rows}, {n}, {k}, {au}, {k}, bp, rowsum, alpha, beta, g, &o, "
               f"{param(instr, 'threads', 1)});")
    return w.text()


# ConvInteger, QLinearConv: Y^T = im2col(X)^T W^T ------------------------------------------


def _accepts_conv(view: OpView) -> str | None:
    q = _QOperands(view.op, [view.results[0], *view.operands])
    assert q.a is not None and q.b is not None
    if q.a.rank != 4:
        return f"only 2-D (NCHW) {view.op} has a C kernel"
    m, k = q.b.shape[0], math.prod(q.b.shape[1:])
    if k > CAP_K:
        return f"{view.op} with {k} products per output > {CAP_K} could overflow int32: no C kernel"
    return _check_params(view, q, 1, m)


class _ConvLayout:
    def __init__(self, instr: Instr) -> None:
        self.q = _QOperands(instr.name, list(instr.base_operands))
        x, w, out = self.q.a, self.q.b, self.q.out
        assert x is not None and w is not None and out is not None
        self.attrs = instr.attrs
        self.n_batch, self.channels, self.height, self.width = x.type.shape
        self.out_channels, self.cg, self.kh, self.kw = w.type.shape
        self.groups = self.attrs.group
        self.mg = self.out_channels // self.groups
        self.oh, self.ow = out.type.shape[2:]
        self.pixels, self.k = self.oh * self.ow, self.cg * self.kh * self.kw
        self.packed_bytes = qpanel_bytes(self.k, self.mg)

    def scratch(self, packed: bool) -> _Scratch:
        s = _Scratch().add("col", "uint8_t", self.pixels * self.k)
        s.add("rowsum", "int32_t", 4 * self.pixels).add("alpha", "int32_t", 4 * self.pixels)
        s.add("beta", "int32_t", 4 * self.mg).add("g", "int32_t", 4 * self.mg).add("mcol", "double", 8 * self.mg)
        if not packed:
            s.add("bpk", "int8_t", self.groups * self.packed_bytes).add("csum", "int32_t", 4 * self.out_channels)
        return s

    def im2col(self, flip: int) -> str:
        """Rows of A_u (x ^ flip): one per output pixel, K = (c, u, v) taps; padding reads
        the zero point."""
        (sh, sw), (dh, dw) = self.attrs.strides, self.attrs.dilations
        pt, pl = self.attrs.pads[0], self.attrs.pads[1]
        h, w = self.height, self.width
        return "\n".join([
            f"for (long p = 0; p < {self.pixels}; p++) {{",
            f"    long oy = p / {self.ow}, ox = p % {self.ow};",
            f"    uint8_t *row = col + p * {self.k};",
            f"    for (long c = 0; c < {self.cg}; c++) for (long u = 0; u < {self.kh}; u++) {{",
            f"        long ih = oy * {sh} - {pt} + u * {dh};",
            f"        for (long v = 0; v < {self.kw}; v++) {{",
            f"            long iw = ox * {sw} - {pl} + v * {dw};",
            f"            row[(c * {self.kh} + u) * {self.kw} + v] = ih >= 0 && ih < {h} && iw >= 0 && iw < {w} "
            f"? xg[(c * {h} + ih) * {w} + iw] ^ {flip} : xz ^ {flip};",
            "        }",
            "    }",
            "}",
        ])


def _plan_conv(instr: Instr, options: KernelOptions) -> KernelPlan:
    lay = _ConvLayout(instr)
    w = lay.q.b
    packed = is_whole_weight(w)
    threads = threads_for(options.num_threads, lay.pixels * lay.mg * lay.k)
    plan = KernelPlan({"threads": threads, "packed": packed}, scratch_bytes=lay.scratch(packed).bytes)
    if packed:
        weights = w.constant().reshape(lay.groups, lay.mg, lay.k)
        parts = [pack_qpanels(np.ascontiguousarray(weights[gi].T)) for gi in range(lay.groups)]
        plan.packed = [(w, "qpanels64_t", np.concatenate([p for p, _ in parts])),
                       (w, "qcolsum_t", np.concatenate([s for _, s in parts]))]
    return plan


@C_KERNELS.kernel("qconv_im2col", "ConvInteger", "QLinearConv", accepts=_accepts_conv, plan=_plan_conv,
                  preamble=QGEMM_C)
def emit_qconv(em: Emitter, instr: Instr) -> str:
    lay = _ConvLayout(instr)
    q = lay.q
    assert q.a is not None and q.b is not None and q.out is not None
    packed = bool(param(instr, "packed"))
    if q.out.type.size == 0:
        return "/* empty result */"
    flip_a, flip_b = _flip(q.a.type, True), _flip(q.b.type, False)
    p, k, mg = lay.pixels, lay.k, lay.mg
    itemsize = q.out.type.dtype.itemsize
    w = CWriter().line(
        f"const uint8_t *x = {em.address(q.a)};",
        f"const uint8_t *wt = {'NULL' if packed else em.address(q.b)}; (void)wt;",  # packed W: only its copy is stored
        f"uint8_t *y = {em.address(q.out)};", *_pointers(q, em), *lay.scratch(packed).declare(em, instr),
        f"const uint8_t xz = {'(uint8_t)za[0]' if q.za is not None else '0'};",
        f"for (long i = 0; i < {p}; i++) alpha[i] = {flip_a} + {'(int32_t)za[0]' if q.za is not None else '0'};")
    if packed:
        w.line(f"const int8_t *bp = (const int8_t *){em.packed(instr, 0)};",
               f"const int32_t *colsum = (const int32_t *){em.packed(instr, 1)};")
    else:
        w.line("const int8_t *bp = bpk; const int32_t *colsum = csum;",
               f"for (long gi = 0; gi < {lay.groups}; gi++)",
               f"    ember_qpack({k}, {mg}, wt + gi * {mg * k}, 1, {k}, {flip_b}, bpk + gi * {lay.packed_bytes}, "
               f"csum + gi * {mg});")
    zb_at = f"gi * {mg} + j" if q.zb is not None and q.zb.type.size > 1 else "0"
    sb = f"sb + gi * {mg}" if q.sb is not None and q.sb.type.size > 1 else "sb"
    w.line(f"for (long nb = 0; nb < {lay.n_batch}; nb++)")
    with w.block(f"for (long gi = 0; gi < {lay.groups}; gi++)"):
        w.line(f"const uint8_t *xg = x + (nb * {lay.channels} + gi * {lay.cg}) * {lay.height * lay.width};",
               lay.im2col(flip_a), f"ember_qrows({p}, {k}, col, {k}, 0, rowsum, NULL);",
               *_col_prep(q, em, mg, k, zb_at, f"(colsum + gi * {mg})"), *_mcol(q, mg, f"gi * {mg}"),
               _qout(q, f"y + (nb * {lay.out_channels} + gi * {mg}) * {p * itemsize}", "1", str(p), False,
                     bias=f"bias + gi * {mg}" if q.bias is not None else "NULL", b_scale=sb),
               f"ember_qgemm({p}, {mg}, {k}, col, {k}, bp + gi * {lay.packed_bytes}, rowsum, alpha, "
               f"beta, g, &o, {param(instr, 'threads', 1)});")
    return w.text()


# The direct and depthwise int8 convolutions, the 8-bit MaxPool and the AVX-512 loop of the
# expanded Q/DQ chains register themselves ahead of the general kernels.
from ember.codegen.kernels import qconv_depthwise, qconv_direct, quantized_chain  # noqa: E402, F401  (registration)
