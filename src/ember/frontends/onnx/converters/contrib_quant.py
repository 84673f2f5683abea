"""Converters for ONNX Runtime's quantized com.microsoft operators (what its quantization tools
write): MatMulIntegerToFloat, DynamicQuantizeMatMul, DynamicQuantizeLSTM, QLinearAdd, QLinearMul,
QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool and QLinearConcat, each expressed
through Ember's own ops with the arithmetic of ONNX Runtime's CPU kernels (contrib.py holds the
registration helper and the float contrib ops)."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.converters.contrib import cast_to, constant_of, contrib
from ember.frontends.onnx.converters.tensor import normalize_axis
from ember.graph.ir import Constant, Value
from ember.ops.elementwise import AlphaAttrs, CastAttrs, ClipAttrs
from ember.ops.quant import QuantizeAttrs
from ember.ops.reduce import ReduceAttrs
from ember.ops.tensor import AxisAttrs, SliceAttrs
from ember.support.errors import ModelImportError, UnsupportedError
from ember.types import DType

# quantized matrix products ------------------------------------------------------------------

def _per_tensor(ctx: NodeContext, value: Value | None, what: str) -> None:
    if value is not None and value.type.size != 1:
        raise UnsupportedError(f"{what} {value.type}: only a per-tensor (one-element) {what} is supported "
                               "(ONNX Runtime's CPU kernel takes no other)")


def _per_column(ctx: NodeContext, value: Value | None, columns: int, what: str) -> None:
    if value is not None and value.type.size != 1 and value.type.shape != (columns,):
        raise ModelImportError(f"{what} {value.type} must be a scalar or 1-D of B's {columns} columns")


def _scalar(ctx: NodeContext, value: Value) -> Value:
    return ctx.reshape(value, ()) if value.type.rank else value


def _integer_matmul_to_float(ctx: NodeContext, a: Value, b: Value, a_zero: Value | None, b_zero: Value | None,
                             a_scale: Value, b_scale: Value, bias: Value | None) -> list[Value]:
    """float(MatMulInteger(A, B)) * (a_scale * b_scale) + bias, in ONNX Runtime's order (the
    scales multiplied first, in float32)."""
    columns = b.type.shape[-1]
    _per_column(ctx, b_scale, columns, "b_scale")
    _per_column(ctx, b_zero, columns, "b_zero_point")
    if bias is not None and bias.type.shape != (columns,):
        raise ModelImportError(f"bias {bias.type} must be 1-D of B's {columns} columns")
    b_scale = b_scale if b_scale.type.size != 1 else _scalar(ctx, b_scale)
    b_zero = b_zero if b_zero is None or b_zero.type.size != 1 else _scalar(ctx, b_zero)
    product = ctx.emit1("MatMulInteger", [a, b, a_zero, b_zero])
    multiplier = ctx.emit1("Mul", [a_scale, b_scale])
    scaled = ctx.emit1("Mul", [ctx.emit1("Cast", [product], CastAttrs(a_scale.type.dtype)), multiplier])
    return [scaled] if bias is None else ctx.result("Add", [scaled, bias])


@contrib("MatMulIntegerToFloat", 7, 1)
def matmul_integer_to_float(ctx: NodeContext) -> list[Value]:
    a, b = ctx.require(0, "A"), ctx.require(1, "B")
    a_scale, b_scale = ctx.require(2, "a_scale"), ctx.require(3, "b_scale")
    a_zero, b_zero, bias = ctx.input(4), ctx.input(5), ctx.input(6)
    _per_tensor(ctx, a_scale, "a_scale")
    _per_tensor(ctx, a_zero, "a_zero_point")
    if a_scale.type.dtype is not DType.FLOAT32:
        raise UnsupportedError(f"a_scale {a_scale.type}: only float32 outputs are supported")
    a_zero = None if a_zero is None else _scalar(ctx, a_zero)
    return _integer_matmul_to_float(ctx, a, b, a_zero, b_zero, _scalar(ctx, a_scale), b_scale, bias)


@contrib("DynamicQuantizeMatMul", 5, 1)
def dynamic_quantize_matmul(ctx: NodeContext) -> list[Value]:
    """A quantized to uint8 at run time (DynamicQuantizeLinear: its range including 0 over
    255 levels), then as MatMulIntegerToFloat."""
    a, b, b_scale, b_zero, bias = ctx.require(0, "A"), ctx.require(1, "B"), ctx.require(2, "b_scale"), \
        ctx.input(3), ctx.input(4)
    if a.type.dtype is not DType.FLOAT32:
        raise ModelImportError(f"A {a.type} must be float32")
    a_q, a_scale, a_zero = ctx.emit("DynamicQuantizeLinear", [a])
    return _integer_matmul_to_float(ctx, a_q, b, a_zero, b_zero, a_scale, b_scale, bias)


# quantized elementwise ops --------------------------------------------------------------------

_RANGES = {DType.UINT8: (0, 255), DType.INT8: (-128, 127)}


def _quantized(ctx: NodeContext, x: Value, what: str, dtype: DType | None = None) -> DType:
    if x.type.dtype not in _RANGES:
        raise ModelImportError(f"{what} {x.type} must be u8 or i8")
    if dtype is not None and x.type.dtype is not dtype:
        raise ModelImportError(f"{what} {x.type} must have the element type {dtype} of the other operands")
    return x.type.dtype


def _scale(ctx: NodeContext, value: Value, what: str) -> Value:
    if value.type.dtype is not DType.FLOAT32 or value.type.size != 1:
        raise UnsupportedError(f"{what} {value.type}: only a per-tensor float32 scale (one element) is supported")
    return _scalar(ctx, value)


def _zero_point(ctx: NodeContext, value: Value | None, dtype: DType, what: str, to: DType) -> Value:
    """A per-tensor zero point as a scalar of type `to` (0 when absent)."""
    if value is None:
        return constant_of(ctx, 0, to, f"{what}_default")
    _quantized(ctx, value, what, dtype)
    if value.type.size != 1:
        raise UnsupportedError(f"{what} {value.type}: only a per-tensor zero point (one element) is supported")
    return cast_to(ctx, _scalar(ctx, value), to)


def _requantize_result(ctx: NodeContext, y: Value, dtype: DType) -> list[Value]:
    """round half to even, saturate to `dtype`'s range, convert: the end of every MLAS kernel."""
    lo, hi = _RANGES[dtype]
    clipped = ctx.emit1("Clip", [ctx.emit1("Round", [y])], ClipAttrs(float(lo), float(hi)))
    return ctx.result("Cast", [clipped], CastAttrs(dtype))


def _qlinear_binary(ctx: NodeContext, op: str) -> list[Value]:
    a, a_scale, a_zero = ctx.require(0, "A"), ctx.require(1, "A_scale"), ctx.input(2)
    b, b_scale, b_zero = ctx.require(3, "B"), ctx.require(4, "B_scale"), ctx.input(5)
    c_scale, c_zero = ctx.require(6, "C_scale"), ctx.input(7)
    dtype = _quantized(ctx, a, "A")
    _quantized(ctx, b, "B", dtype)
    sa, sb, sc = _scale(ctx, a_scale, "A_scale"), _scale(ctx, b_scale, "B_scale"), _scale(ctx, c_scale, "C_scale")
    f32, i32 = DType.FLOAT32, DType.INT32
    zc = _zero_point(ctx, c_zero, dtype, "C_zero_point", f32)
    if op == "Add":
        # MLAS: A * (sA / sC) + (B * (sB / sC) + (zC - (sA / sC * zA + sB / sC * zB))), rounded.
        za = _zero_point(ctx, a_zero, dtype, "A_zero_point", f32)
        zb = _zero_point(ctx, b_zero, dtype, "B_zero_point", f32)
        ratio_a, ratio_b = ctx.emit1("Div", [sa, sc]), ctx.emit1("Div", [sb, sc])
        shift = ctx.emit1("Add", [ctx.emit1("Mul", [ratio_a, za]), ctx.emit1("Mul", [ratio_b, zb])])
        fixed = ctx.emit1("Sub", [zc, shift])
        b_part = ctx.emit1("Add", [ctx.emit1("Mul", [cast_to(ctx, b, f32), ratio_b]), fixed])
        y = ctx.emit1("Add", [ctx.emit1("Mul", [cast_to(ctx, a, f32), ratio_a]), b_part])
    else:
        # MLAS: float((A - zA) * (B - zB)) * (sA * sB / sC) + zC, rounded; the product is exact.
        za = _zero_point(ctx, a_zero, dtype, "A_zero_point", i32)
        zb = _zero_point(ctx, b_zero, dtype, "B_zero_point", i32)
        centered_a = ctx.emit1("Sub", [cast_to(ctx, a, i32), za])
        product = ctx.emit1("Mul", [centered_a, ctx.emit1("Sub", [cast_to(ctx, b, i32), zb])])
        ratio = ctx.emit1("Div", [ctx.emit1("Mul", [sa, sb]), sc])
        y = ctx.emit1("Add", [ctx.emit1("Mul", [cast_to(ctx, product, f32), ratio]), zc])
    return _requantize_result(ctx, y, dtype)


@contrib("QLinearAdd", 8, 1)
def qlinear_add(ctx: NodeContext) -> list[Value]:
    return _qlinear_binary(ctx, "Add")


@contrib("QLinearMul", 8, 1)
def qlinear_mul(ctx: NodeContext) -> list[Value]:
    return _qlinear_binary(ctx, "Mul")


def _scalar_value(value: Value | None, default: float) -> float | None:
    """The one number a constant holds (`default` when absent), None when computed at run time."""
    if value is None:
        return default
    if isinstance(value, Constant) and value.data.size == 1:
        return value.data.reshape(()).item()
    return None


FloatFn = Callable[[np.ndarray], np.ndarray]


def _lookup(ctx: NodeContext, x: Value, x_scale: Value, x_zero: Value | None, y_scale: Value,
            y_zero: Value | None, fn: FloatFn, emit_fn: Callable[[Value], Value], dtype: DType,
            final: bool = True) -> Value:
    """y = quantize(fn(dequantize(x))), as ONNX Runtime's lookup-table kernels compute it: with
    constant scales and zero points, a 256-entry table built here in float32 (dequantize as
    scale * (x - zero), fn, divide by the output scale, round half to even, saturate) and a
    Gather; otherwise DequantizeLinear, the op, QuantizeLinear."""
    x_dtype = _quantized(ctx, x, "X")
    if y_zero is not None:
        _quantized(ctx, y_zero, "Y_zero_point", dtype)
    if x_zero is not None:
        _quantized(ctx, x_zero, "X_zero_point", x_dtype)
    _scale(ctx, x_scale, "X_scale")
    _scale(ctx, y_scale, "Y_scale")
    xs, xz = _scalar_value(x_scale, 1.0), _scalar_value(x_zero, 0)
    ys, yz = _scalar_value(y_scale, 1.0), _scalar_value(y_zero, 0)
    names = [ctx.output_name(0)] if final else None
    if xs is not None and xz is not None and ys is not None and yz is not None:
        lo, hi = _RANGES[x_dtype]
        codes = np.arange(lo, hi + 1, dtype=np.int64)
        with np.errstate(all="ignore"):
            dequantized = np.float32(xs) * (codes - int(xz)).astype(np.float32)
            out = fn(dequantized).astype(np.float32)
            q = np.rint(out / np.float32(ys)).astype(np.float64) + float(yz)
        y_lo, y_hi = _RANGES[dtype]
        table = ctx.add_constant(np.clip(np.nan_to_num(q, nan=0.0), y_lo, y_hi).astype(dtype.numpy),
                                 f"{ctx.name}_table")
        index = cast_to(ctx, x, DType.INT32)
        if lo:
            index = ctx.emit1("Sub", [index, constant_of(ctx, lo, DType.INT32, "table_start")])
        return ctx.emit("Gather", [table, index], AxisAttrs(0), names)[0]
    dequantized_v = ctx.emit1("DequantizeLinear", [x, _scalar(ctx, x_scale), None if x_zero is None else
                                                   _scalar(ctx, x_zero)], QuantizeAttrs(DType.FLOAT32, 1, 0))
    zero = _scalar(ctx, y_zero) if y_zero is not None else constant_of(ctx, 0, dtype, "Y_zero_point_default")
    return ctx.emit("QuantizeLinear", [emit_fn(dequantized_v), _scalar(ctx, y_scale), zero],
                    QuantizeAttrs(dtype, 1, 0, True), names)[0]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)


@contrib("QLinearSigmoid", 5, 1)
def qlinear_sigmoid(ctx: NodeContext) -> Value:
    x = ctx.require(0, "X")
    return _lookup(ctx, x, ctx.require(1, "X_scale"), ctx.input(2), ctx.require(3, "Y_scale"), ctx.input(4),
                   _sigmoid, lambda v: ctx.emit1("Sigmoid", [v]), x.type.dtype)


@contrib("QLinearLeakyRelu", 5, 1, ("alpha",))
def qlinear_leaky_relu(ctx: NodeContext) -> Value:
    x = ctx.require(0, "X")
    alpha = ctx.attr_float("alpha", 0.01)
    a32 = np.float32(alpha)

    def leaky(v: np.ndarray) -> np.ndarray:
        return np.where(v >= 0, v, v * a32).astype(np.float32)

    return _lookup(ctx, x, ctx.require(1, "X_scale"), ctx.input(2), ctx.require(3, "Y_scale"), ctx.input(4),
                   leaky, lambda v: ctx.emit1("LeakyRelu", [v], AlphaAttrs(alpha)), x.type.dtype)


@contrib("QLinearGlobalAveragePool", 5, 1, ("channels_last",))
def qlinear_global_average_pool(ctx: NodeContext) -> list[Value]:
    """MLAS: sum over the image in int32, minus x_zero_point * image size, times
    x_scale / (y_scale * image size) in float32, rounded half to even, plus y_zero_point,
    saturated. NCHW, or NHWC with channels_last=1; spatial dims become 1."""
    x, x_scale, x_zero = ctx.require(0, "X"), ctx.require(1, "x_scale"), ctx.require(2, "x_zero_point")
    y_scale, y_zero = ctx.require(3, "y_scale"), ctx.require(4, "y_zero_point")
    dtype = _quantized(ctx, x, "X")
    if x.type.rank < 3:
        raise ModelImportError(f"X {x.type} must have rank >= 3 (batch, channels and at least one spatial dim)")
    rank = x.type.rank
    axes = tuple(range(1, rank - 1)) if ctx.attr_bool("channels_last", False) else tuple(range(2, rank))
    image = math.prod(x.type.shape[a] for a in axes)
    f32, i32 = DType.FLOAT32, DType.INT32
    sx, sy = _scale(ctx, x_scale, "x_scale"), _scale(ctx, y_scale, "y_scale")
    zx = _zero_point(ctx, x_zero, dtype, "x_zero_point", i32)
    zy = _zero_point(ctx, y_zero, dtype, "y_zero_point", f32)
    total = ctx.emit1("ReduceSum", [cast_to(ctx, x, i32)], ReduceAttrs(axes, keepdims=True))
    biased = ctx.emit1("Sub", [total, ctx.emit1("Mul", [zx, constant_of(ctx, image, i32, "image_size")])])
    scale = ctx.emit1("Div", [sx, ctx.emit1("Mul", [sy, constant_of(ctx, float(image), f32, "image_size_f")])])
    y = ctx.emit1("Add", [ctx.emit1("Round", [ctx.emit1("Mul", [cast_to(ctx, biased, f32), scale])]), zy])
    lo, hi = _RANGES[dtype]
    clipped = ctx.emit1("Clip", [y], ClipAttrs(float(lo), float(hi)))
    return ctx.result("Cast", [clipped], CastAttrs(dtype))


@contrib("QLinearConcat", 1 << 20, 1, ("axis",))  # variadic
def qlinear_concat(ctx: NodeContext) -> list[Value]:
    """Each (X, X_scale, X_zero_point) requantized to (Y_scale, Y_zero_point) (left as is where
    its parameters are Y's), then concatenated."""
    y_scale, y_zero = ctx.require(0, "Y_scale"), ctx.require(1, "Y_zero_point")
    rest = ctx.num_inputs - 2
    if rest < 3 or rest % 3:
        raise ModelImportError(f"{ctx.num_inputs} inputs given: QLinearConcat takes Y_scale, Y_zero_point and then "
                               "(X, X_scale, X_zero_point) triples")
    dtype = _quantized(ctx, y_zero, "Y_zero_point")
    target = (_scalar_value(y_scale, 1.0), _scalar_value(y_zero, 0))
    parts = []
    for i in range(2, ctx.num_inputs, 3):
        x, x_scale, x_zero = ctx.require(i, "X"), ctx.require(i + 1, "X_scale"), ctx.require(i + 2, "X_zero_point")
        _quantized(ctx, x, f"input {i}", dtype)
        same = target[0] is not None and target[1] is not None and \
            (_scalar_value(x_scale, 1.0), _scalar_value(x_zero, 0)) == target
        if same or (x_scale is y_scale and x_zero is y_zero):
            parts.append(x)
        else:
            parts.append(_lookup(ctx, x, x_scale, x_zero, y_scale, y_zero, lambda v: v, lambda v: v, dtype,
                                 final=False))
    rank = parts[0].type.rank
    return ctx.result("Concat", parts, AxisAttrs(normalize_axis(ctx.attr_int("axis"), rank)))


# DynamicQuantizeLSTM --------------------------------------------------------------------------

_LSTM_DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


def _take(ctx: NodeContext, x: Value, axis: int, start: int, end: int, shape: Sequence[int] | None = None) -> Value:
    part = ctx.emit1("Slice", [x], SliceAttrs((axis,), (start,), (end,), (1,)))
    return part if shape is None else ctx.reshape(part, shape)


def _direction_zero_point(ctx: NodeContext, i: int, what: str, direction: int, dtype: DType) -> Value:
    """Direction `direction`'s weight zero point as a scalar. ONNX Runtime reads one zero point
    per direction (the first), and refuses per-channel ones that are not all equal (zero for i8)."""
    data = ctx.constant(i, what)
    if data.dtype != dtype.numpy:
        raise ModelImportError(f"{what} {data.dtype} must have the weights' type {dtype}")
    row = data.reshape(data.shape[0], -1)[direction] if data.ndim else data.reshape(1)
    if np.any(row != row[0]) or (dtype is DType.INT8 and data.ndim == 2 and np.any(row != 0)):
        raise UnsupportedError(f"{what} {row.tolist()} of direction {direction}: per-channel zero points must all "
                               "be equal (zero for i8 weights), as ONNX Runtime requires")
    return ctx.add_constant(np.asarray(row[0], dtype.numpy), f"{ctx.name}_{what}_{direction}")


def _direction_scale(ctx: NodeContext, scale: Value, direction: int, dirs: int, columns: int, what: str) -> Value:
    """Direction `direction`'s scale: a scalar, or [4 * hidden] per output column."""
    if scale.type.dtype is not DType.FLOAT32:
        raise ModelImportError(f"{what} {scale.type} must be float32")
    if scale.type.shape == (dirs,):
        return _take(ctx, scale, 0, direction, direction + 1, ())
    if scale.type.shape == (dirs, columns):
        return _take(ctx, scale, 0, direction, direction + 1, (columns,))
    raise ModelImportError(f"{what} {scale.type} must be [{dirs}] or [{dirs}, {columns}]")


def _quantized_product(ctx: NodeContext, x: Value, weights: Value, zero: Value, scale: Value) -> Value:
    """x quantized at run time (DynamicQuantizeLinear over the whole tensor) times the
    quantized weights, back in float: float(acc) * (x_scale * w_scale), as ONNX Runtime's
    quantized RNN GEMM computes it."""
    x_q, x_scale, x_zero = ctx.emit("DynamicQuantizeLinear", [x])
    product = ctx.emit1("MatMulInteger", [x_q, weights, x_zero, zero])
    return ctx.emit1("Mul", [ctx.emit1("Cast", [product], CastAttrs(DType.FLOAT32)),
                             ctx.emit1("Mul", [x_scale, scale])])


@contrib("DynamicQuantizeLSTM", 12, 3, ("activations", "activation_alpha", "activation_beta", "clip", "direction",
                                        "hidden_size", "input_forget"))
def dynamic_quantize_lstm(ctx: NodeContext) -> list[Value | None]:
    """An LSTM with quantized weights W [dirs, input, 4H] and R [dirs, hidden, 4H] (gates i, o,
    f, c), unrolled over the sequence as ONNX Runtime computes it: X quantized once over all
    steps, the hidden state quantized again at every step (one scale for the whole batch, as
    ONNX Runtime does on one thread; with several it quantizes per block of batch rows), gate
    pre-activations X W + H R (+ peephole) + (Wb + Rb), clipped, then the default activations."""
    x, w, r = ctx.require(0, "X"), ctx.require(1, "W"), ctx.require(2, "R")
    bias, lengths, h0, c0, peephole = (ctx.input(i) for i in range(3, 8))
    w_scale, r_scale = ctx.require(8, "W_scale"), ctx.require(10, "R_scale")
    direction = ctx.attr_str("direction", "forward")
    if direction not in _LSTM_DIRECTIONS:
        raise ModelImportError(f"direction '{direction}' is not forward, reverse or bidirectional")
    dirs = _LSTM_DIRECTIONS[direction]
    if x.type.dtype is not DType.FLOAT32 or x.type.rank != 3:
        raise ModelImportError(f"X {x.type} must be float32 [sequence, batch, input]")
    seq, batch, features = x.type.shape
    hidden = ctx.attr_int("hidden_size", r.type.shape[1] if r.type.rank == 3 else 0)
    gates = 4 * hidden
    for weights, rows, what in ((w, features, "W"), (r, hidden, "R")):
        if weights.type.dtype not in _RANGES or weights.type.shape != (dirs, rows, gates):
            raise ModelImportError(f"{what} {weights.type} must be u8 or i8 [{dirs}, {rows}, {gates}]")
    activations = ctx.attr_strs("activations", None)
    default = ("sigmoid", "tanh", "tanh") * dirs
    if activations is not None and tuple(a.lower() for a in activations) != default:
        raise UnsupportedError(f"activations {list(activations)} are not supported; only the default Sigmoid, "
                               "Tanh, Tanh")
    clip = ctx.attr_float("clip", None)
    input_forget = ctx.attr_bool("input_forget", False)
    if lengths is not None:
        data = ctx.constant(4, "sequence_lens")
        if not np.all(data == seq):
            raise UnsupportedError(f"sequence_lens {data.tolist()} differ from the sequence length {seq}: only "
                                   "full-length sequences are supported")
    for value, shape, what in ((bias, (dirs, 2 * gates), "B"), (h0, (dirs, batch, hidden), "initial_h"),
                               (c0, (dirs, batch, hidden), "initial_c"), (peephole, (dirs, 3 * hidden), "P")):
        if value is not None and value.type.shape != shape:
            raise ModelImportError(f"{what} {value.type} must be {list(shape)}")
    f32 = DType.FLOAT32
    zero_state = ctx.add_constant(np.zeros((batch, hidden), np.float32), f"{ctx.name}_zero_state")
    one = constant_of(ctx, 1.0, f32, "one")

    def gate(pre: Value, bias_part: Value | None, fn: str) -> Value:
        if bias_part is not None:
            pre = ctx.emit1("Add", [pre, bias_part])
        if clip is not None:
            pre = ctx.emit1("Clip", [pre], ClipAttrs(-clip, clip))
        return ctx.emit1(fn, [pre])

    ys, final_h, final_c = [], [], []
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        xs = x if not reverse else ctx.emit1("Gather", [x, constant_of(ctx, np.arange(seq - 1, -1, -1), DType.INT64,
                                                                  "reversed")], AxisAttrs(0))
        w_d = _take(ctx, w, 0, d, d + 1, (features, gates))
        r_d = _take(ctx, r, 0, d, d + 1, (hidden, gates))
        w_zero = _direction_zero_point(ctx, 9, "W_zero_point", d, w.type.dtype)
        r_zero = _direction_zero_point(ctx, 11, "R_zero_point", d, r.type.dtype)
        projected = _quantized_product(ctx, xs, w_d, w_zero, _direction_scale(ctx, w_scale, d, dirs, gates, "W_scale"))
        r_scale_d = _direction_scale(ctx, r_scale, d, dirs, gates, "R_scale")
        biases: list[Value | None] = [None] * 4
        if bias is not None:  # Wb + Rb, summed once (as ONNX Runtime does)
            b_d = _take(ctx, bias, 0, d, d + 1, (2 * gates,))
            fused = ctx.emit1("Add", [_take(ctx, b_d, 0, 0, gates), _take(ctx, b_d, 0, gates, 2 * gates)])
            biases = [_take(ctx, fused, 0, k * hidden, (k + 1) * hidden) for k in range(4)]
        peep: list[Value | None] = [None] * 3
        if peephole is not None:  # i, o, f
            p_d = _take(ctx, peephole, 0, d, d + 1, (3 * hidden,))
            peep = [_take(ctx, p_d, 0, k * hidden, (k + 1) * hidden) for k in range(3)]
        h = zero_state if h0 is None else _take(ctx, h0, 0, d, d + 1, (batch, hidden))
        c = zero_state if c0 is None else _take(ctx, c0, 0, d, d + 1, (batch, hidden))
        outputs = []
        for t in range(seq):
            step = ctx.emit1("Add", [_take(ctx, projected, 0, t, t + 1, (batch, gates)),
                                     _quantized_product(ctx, h, r_d, r_zero, r_scale_d)])
            pre_i, pre_o, pre_f, pre_c = (_take(ctx, step, 1, k * hidden, (k + 1) * hidden) for k in range(4))
            if peep[0] is not None:
                pre_i = ctx.emit1("Add", [pre_i, ctx.emit1("Mul", [c, peep[0]])])
            i_gate = gate(pre_i, biases[0], "Sigmoid")
            if input_forget:
                f_gate = ctx.emit1("Sub", [one, i_gate])
            else:
                if peep[2] is not None:
                    pre_f = ctx.emit1("Add", [pre_f, ctx.emit1("Mul", [c, peep[2]])])
                f_gate = gate(pre_f, biases[2], "Sigmoid")
            candidate = gate(pre_c, biases[3], "Tanh")
            c = ctx.emit1("Add", [ctx.emit1("Mul", [c, f_gate]), ctx.emit1("Mul", [i_gate, candidate])])
            if peep[1] is not None:
                pre_o = ctx.emit1("Add", [pre_o, ctx.emit1("Mul", [c, peep[1]])])
            o_gate = gate(pre_o, biases[1], "Sigmoid")
            h = ctx.emit1("Mul", [ctx.emit1("Tanh", [c]), o_gate])
            outputs.append(ctx.reshape(h, (1, 1, batch, hidden)))
        if reverse:
            outputs.reverse()
        ys.append(outputs[0] if seq == 1 else ctx.emit1("Concat", outputs, AxisAttrs(0)))
        final_h.append(ctx.reshape(h, (1, batch, hidden)))
        final_c.append(ctx.reshape(c, (1, batch, hidden)))

    def stacked(parts: list[Value], axis: int, i: int) -> Value | None:
        if not ctx.output_name(i):
            return None
        return parts[0] if len(parts) == 1 else ctx.emit("Concat", parts, AxisAttrs(axis), [ctx.output_name(i)])[0]

    return [stacked(ys, 1, 0), stacked(final_h, 0, 1), stacked(final_c, 0, 2)]
