"""Explicit quantization ops, as ONNX models spell them: QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.

Scales and zero points are operands (per tensor, per axis, or per block of `block_size`
along the axis). Quantizing divides in the input's float type, rounds half to even and
saturates to the output type; dequantizing computes (x - zero_point) * scale in float32.
Integer products accumulate exactly (in float64, exact below 2**53). These ops are separate
from the quantization parameters TensorType carries (types.QuantParams), which the
quantizer (quant/) uses."""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ember.ops.nn import ConvAttrs, _conv, _conv_infer, _matmul_infer
from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import normalize_axis
from ember.types import DType, TensorType

QUANT_TYPES = (DType.UINT8, DType.INT8, DType.UINT16, DType.INT16, DType.UINT4, DType.INT4, DType.UINT2,
               DType.INT2, DType.FLOAT8E4M3FN, DType.FLOAT8E4M3FNUZ, DType.FLOAT8E5M2, DType.FLOAT8E5M2FNUZ,
               DType.FLOAT4E2M1)


@dataclass(frozen=True)
class QuantizeAttrs:
    """to: the quantized type (QuantizeLinear) or the real type (DequantizeLinear);
    axis/block_size place per-axis or blocked scales (block_size 0: not blocked)."""

    to: DType
    axis: int = 1
    block_size: int = 0
    saturate: bool = True


def broadcast_param(value: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point reshaped (and, when blocked, repeated) to broadcast to `shape`."""
    if value.ndim == 0 or value.size == 1 and not block_size:
        return value.reshape(())
    axis = normalize_axis(axis, len(shape))
    if block_size:
        return np.repeat(value, block_size, axis=axis).take(range(shape[axis]), axis=axis)
    dims = [1] * len(shape)
    dims[axis] = value.size
    return value.reshape(dims)


def _check_param(op: str, x: TensorType, t: TensorType | None, attrs: QuantizeAttrs, what: str) -> None:
    if t is None or t.rank == 0 or t.size == 1 and not attrs.block_size:
        return
    if x.rank == 0:
        raise OpError(f"{op} {what} {list(t.shape)} is per-axis, but the input is a scalar (it needs a scalar {what})")
    axis = normalize_axis(attrs.axis, x.rank)
    if attrs.block_size:
        expected = x.shape[:axis] + (-(-x.shape[axis] // attrs.block_size),) + x.shape[axis + 1:]
        if t.shape != expected:
            raise OpError(f"{op} blocked {what} must have shape {list(expected)}, got {list(t.shape)}")
    elif t.shape != (x.shape[axis],):
        raise OpError(f"{op} {what} must be a scalar or have shape [{x.shape[axis]}], got {list(t.shape)}")


def _quantize_infer(attrs: QuantizeAttrs, types):
    x, scale, zero = types
    if attrs.to not in QUANT_TYPES:
        raise OpError(f"QuantizeLinear cannot produce {attrs.to}")
    if zero is not None and zero.dtype is not attrs.to:
        raise OpError(f"QuantizeLinear zero point {zero} must be {attrs.to}")
    _check_param("QuantizeLinear", x, scale, attrs, "scale")
    _check_param("QuantizeLinear", x, zero, attrs, "zero point")
    return (TensorType(attrs.to, x.shape),)


def quantize(x: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, attrs: QuantizeAttrs) -> np.ndarray:
    compute = x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)
    scaled = x.astype(compute) / broadcast_param(scale, x.shape, attrs.axis, attrs.block_size).astype(compute)
    target = attrs.to
    if target.is_narrow_float:
        if zero is not None and target is DType.FLOAT4E2M1:
            scaled = scaled + broadcast_param(zero, x.shape, attrs.axis, attrs.block_size).astype(np.float32)
        if attrs.saturate and target is not DType.FLOAT4E2M1:
            info = ml_dtypes.finfo(target.numpy)
            scaled = np.clip(scaled.astype(np.float32), float(info.min), float(info.max))
        return scaled.astype(target.numpy)
    q = np.rint(scaled).astype(np.float64)
    if zero is not None:
        q = q + broadcast_param(zero, x.shape, attrs.axis, attrs.block_size).astype(np.float64)
    bounds = ml_dtypes.iinfo(target.numpy)
    q = np.where(np.isnan(q), 0.0, q)  # a NaN quantizes to 0, as a saturating Cast of NaN (the C kernel agrees)
    return np.clip(q, int(bounds.min), int(bounds.max)).astype(target.numpy)


define_op(OpDef("QuantizeLinear", ("x", "scale", "zero_point?"), ("y",), _quantize_infer,
                lambda a, xs: (quantize(xs[0], xs[1], xs[2], a),), attrs=QuantizeAttrs))


def _dequantize_infer(attrs: QuantizeAttrs, types):
    x, scale, zero = types
    if not attrs.to.is_float:
        raise OpError(f"DequantizeLinear must produce a float type, got {attrs.to}")
    if zero is not None and zero.dtype is not x.dtype:
        raise OpError(f"DequantizeLinear zero point {zero} must have the type of x ({x.dtype})")
    _check_param("DequantizeLinear", x, scale, attrs, "scale")
    _check_param("DequantizeLinear", x, zero, attrs, "zero point")
    return (TensorType(attrs.to, x.shape),)


def dequantize(x: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, attrs: QuantizeAttrs) -> np.ndarray:
    dx = x.astype(np.float32)
    if zero is not None and not DType.from_numpy(x.dtype).is_narrow_float:
        dx = dx - broadcast_param(zero, x.shape, attrs.axis, attrs.block_size).astype(np.float32)
    y = dx * broadcast_param(scale, x.shape, attrs.axis, attrs.block_size).astype(np.float32)
    return y.astype(attrs.to.numpy)


define_op(OpDef("DequantizeLinear", ("x", "scale", "zero_point?"), ("y",), _dequantize_infer,
                lambda a, xs: (dequantize(xs[0], xs[1], xs[2], a),), attrs=QuantizeAttrs))


def _dynamic_quantize_infer(attrs, types):
    (x,) = types
    if x.dtype is not DType.FLOAT32:
        raise OpError(f"DynamicQuantizeLinear needs f32, got {x.dtype}")
    return (TensorType(DType.UINT8, x.shape), TensorType(DType.FLOAT32, ()), TensorType(DType.UINT8, ()))


def _dynamic_quantize(attrs, arrays):
    """uint8 over [min(0, min x), max(0, max x)]: scale = range / 255, zero point rounded."""
    (x,) = arrays
    high = np.float32(max(0.0, float(np.max(x)))) if x.size else np.float32(0)
    low = np.float32(min(0.0, float(np.min(x)))) if x.size else np.float32(0)
    scale = np.float32((high - low) if high != low else 1.0) / np.float32(255)
    zero = np.rint(np.clip(np.float32(0) - low / scale, 0, 255))
    y = np.clip(np.rint(x / scale) + zero, 0, 255)
    return (y.astype(np.uint8), np.asarray(scale, np.float32), np.asarray(zero).astype(np.uint8))


define_op(OpDef("DynamicQuantizeLinear", ("x",), ("y", "y_scale", "y_zero_point"), _dynamic_quantize_infer,
                _dynamic_quantize))


def _int8(t: TensorType | None, op: str, what: str) -> None:
    if t is not None and t.dtype not in (DType.INT8, DType.UINT8):
        raise OpError(f"{op} {what} must be i8 or u8, got {t.dtype}")


def _centered(x: np.ndarray, zero: np.ndarray | None, axis_shape: tuple[int, ...] | None = None) -> np.ndarray:
    out = x.astype(np.float64)
    if zero is not None:
        z = zero.astype(np.float64)
        out = out - (z.reshape(axis_shape) if axis_shape is not None and z.size > 1 else z)
    return out


def _rows_cols(a: TensorType, b: TensorType) -> tuple[int, int]:
    """The rows of A and the columns of B of a matrix product (1 for a vector)."""
    return a.shape[-2] if a.rank >= 2 else 1, b.shape[-1] if b.rank >= 2 else 1


def _one_or_per_axis(t: TensorType | None, count: int, op: str, what: str) -> None:
    """A scale or zero point: one value (scalar or [1]), or `count` of them in a vector."""
    if t is not None and (t.rank > 1 or t.size not in (1, count)):
        raise OpError(f"{op} {what} must be a scalar{f' or have {count} values' if count > 1 else ''}, got {t}")


def _matmul_integer_infer(attrs, types):
    a, b, a_zero, b_zero = types
    for t, what in ((a, "A"), (b, "B"), (a_zero, "a_zero_point"), (b_zero, "b_zero_point")):
        _int8(t, "MatMulInteger", what)
    (y,) = _matmul_infer(None, [a.with_dtype(DType.INT32), b.with_dtype(DType.INT32)])
    rows, cols = _rows_cols(a, b)
    # Per tensor, per row of A ([M], or [..., M, 1]) or per column of B ([N], or [..., 1, N]).
    if a_zero is not None and a_zero.rank >= 2:
        if a_zero.rank > a.rank or a_zero.shape[-1] != 1 or a_zero.shape[-2] not in (1, rows) \
                or any(d != 1 for d in a_zero.shape[:-2]):
            raise OpError(f"MatMulInteger a_zero_point {a_zero} must be per tensor or per row of A {a} "
                          f"([{rows}] or [..., {rows}, 1], one batch)")
    else:
        _one_or_per_axis(a_zero, rows, "MatMulInteger", "a_zero_point")
    if b_zero is not None and b_zero.rank >= 2:
        batch = b.shape[:-2][len(b.shape) - b_zero.rank:] if b_zero.rank <= b.rank else None
        if batch is None or b_zero.shape[-2] != 1 or b_zero.shape[-1] not in (1, cols) \
                or any(d not in (1, n) for d, n in zip(b_zero.shape[:-2], batch, strict=True)):
            raise OpError(f"MatMulInteger b_zero_point {b_zero} must be per tensor or per column of B {b} "
                          f"([{cols}] or [..., 1, {cols}])")
    else:
        _one_or_per_axis(b_zero, cols, "MatMulInteger", "b_zero_point")
    return (y,)


def _matmul_integer(attrs, arrays):
    a, b, a_zero, b_zero = arrays
    # A per-row zero point of A is [M]; of B, per column [N].
    a_c = _centered(a, a_zero, (-1, 1) if a_zero is not None and a_zero.size > 1 else None)
    b_c = _centered(b, b_zero)
    return (np.rint(a_c @ b_c).astype(np.int32),)


define_op(OpDef("MatMulInteger", ("a", "b", "a_zero_point?", "b_zero_point?"), ("y",), _matmul_integer_infer,
                _matmul_integer))


def _conv_integer_infer(attrs: ConvAttrs, types):
    x, w, x_zero, w_zero = types
    for t, what in ((x, "x"), (w, "w"), (x_zero, "x_zero_point"), (w_zero, "w_zero_point")):
        _int8(t, "ConvInteger", what)
    _one_or_per_axis(x_zero, 1, "ConvInteger", "x_zero_point")
    _one_or_per_axis(w_zero, w.shape[0] if w.rank else 1, "ConvInteger", "w_zero_point")
    (y,) = _conv_infer(attrs, [x.with_dtype(DType.FLOAT32), w.with_dtype(DType.FLOAT32), None])
    return (y.with_dtype(DType.INT32),)


def _int_conv(attrs: ConvAttrs, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    (y,) = _conv(attrs, [x, w, None])  # float64 in, float64 out: exact for 8-bit products
    return y


def _conv_integer(attrs: ConvAttrs, arrays):
    x, w, x_zero, w_zero = arrays
    wc = _centered(w, w_zero, (-1,) + (1,) * (w.ndim - 1))
    return (np.rint(_int_conv(attrs, _centered(x, x_zero), wc)).astype(np.int32),)


define_op(OpDef("ConvInteger", ("x", "w", "x_zero_point?", "w_zero_point?"), ("y",), _conv_integer_infer,
                _conv_integer, attrs=ConvAttrs))


def _requantize(acc: np.ndarray, multiplier: np.ndarray, y_zero: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """rint(acc * multiplier) + y_zero, saturated: the zero point (an integer) is added after
    rounding, which is exact and leaves no multiply-add for a compiler to contract."""
    info = np.iinfo(dtype)
    return np.clip(np.rint(acc * multiplier) + y_zero.astype(np.float64), info.min, info.max).astype(dtype)


def _params_fit(op: str, operands) -> None:
    """Each scale a float, each zero point of its operand's element type (ONNX's T1/T2/T3)."""
    for name, t, scale, zero in operands:
        if not scale.dtype.is_float:
            raise OpError(f"{op} {name}_scale must be a float, got {scale.dtype}")
        if t is not None and zero is not None and zero.dtype is not t.dtype:
            raise OpError(f"{op} {name}_zero_point is {zero.dtype}, but {name} is {t.dtype}")


def _qlinear_matmul_infer(attrs, types):
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = types
    _int8(a, "QLinearMatMul", "A")
    _int8(b, "QLinearMatMul", "B")
    _int8(y_zero, "QLinearMatMul", "y_zero_point")
    _params_fit("QLinearMatMul", (("a", a, a_scale, a_zero), ("b", b, b_scale, b_zero), ("y", None, y_scale, y_zero)))
    (y,) = _matmul_infer(None, [a.with_dtype(DType.INT32), b.with_dtype(DType.INT32)])
    # Each scale and zero point: one value, or one per row of A (a_*) or per column (b_*, y_*).
    rows, cols = _rows_cols(a, b)
    for t, what, count in ((a_scale, "a_scale", rows), (a_zero, "a_zero_point", rows), (b_scale, "b_scale", cols),
                           (b_zero, "b_zero_point", cols), (y_scale, "y_scale", cols), (y_zero, "y_zero_point", cols)):
        _one_or_per_axis(t, count, "QLinearMatMul", what)
    return (y.with_dtype(y_zero.dtype),)


def _qlinear_matmul(attrs, arrays):
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = arrays
    acc = _centered(a, a_zero, (-1, 1)) @ _centered(b, b_zero)
    multiplier = (a_scale.astype(np.float64).reshape(-1, 1) if a_scale.size > 1 else a_scale.astype(np.float64)) \
        * b_scale.astype(np.float64) / y_scale.astype(np.float64)
    return (_requantize(acc, multiplier, y_zero, y_zero.dtype),)


define_op(OpDef("QLinearMatMul", ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale",
                                  "y_zero_point"), ("y",), _qlinear_matmul_infer, _qlinear_matmul))


def _qlinear_conv_infer(attrs: ConvAttrs, types):
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, b = types
    _int8(x, "QLinearConv", "x")
    _int8(w, "QLinearConv", "w")
    _int8(y_zero, "QLinearConv", "y_zero_point")
    _params_fit("QLinearConv", (("x", x, x_scale, x_zero), ("w", w, w_scale, w_zero), ("y", None, y_scale, y_zero)))
    if b is not None and b.dtype is not DType.INT32:
        raise OpError(f"QLinearConv bias must be i32, got {b.dtype}")
    # x and y per tensor; w per tensor or per output channel.
    channels = w.shape[0] if w.rank else 1
    for t, what, count in ((x_scale, "x_scale", 1), (x_zero, "x_zero_point", 1), (w_scale, "w_scale", channels),
                           (w_zero, "w_zero_point", channels), (y_scale, "y_scale", 1), (y_zero, "y_zero_point", 1)):
        _one_or_per_axis(t, count, "QLinearConv", what)
    (y,) = _conv_infer(attrs, [x.with_dtype(DType.FLOAT32), w.with_dtype(DType.FLOAT32), None])
    return (y.with_dtype(y_zero.dtype),)


def _qlinear_conv(attrs: ConvAttrs, arrays):
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, b = arrays
    per_channel = (-1,) + (1,) * (w.ndim - 1)
    acc = _int_conv(attrs, _centered(x, x_zero), _centered(w, w_zero, per_channel))
    if b is not None:
        acc = acc + b.astype(np.float64).reshape((1, -1) + (1,) * (x.ndim - 2))
    w_s = w_scale.astype(np.float64)
    w_s = w_s.reshape((1, -1) + (1,) * (x.ndim - 2)) if w_s.size > 1 else w_s
    multiplier = x_scale.astype(np.float64) * w_s / y_scale.astype(np.float64)
    return (_requantize(acc, multiplier, y_zero, y_zero.dtype),)


define_op(OpDef("QLinearConv", ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale",
                                "y_zero_point", "b?"), ("y",), _qlinear_conv_infer, _qlinear_conv, attrs=ConvAttrs))

__all__ = ["QUANT_TYPES", "QuantizeAttrs", "broadcast_param", "dequantize", "quantize"]
