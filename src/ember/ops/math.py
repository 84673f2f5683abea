"""More elementwise ops: inverse and hyperbolic trigonometry, Mish, NaN/Inf tests, the
bitwise family and BitShift, and the parameterized activations Selu, Celu, ThresholdedRelu,
Shrink and PRelu. All are primitives (one instruction each) and share elementwise.py's
inference rules; the references compute in float64 and round once."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.ops.elementwise import ELEMENTWISE, _binary_reference, _in_dtype, _unary_infer
from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import broadcast_shapes, require_float, same_dtype
from ember.types import DType, TensorType


def _f64(fn):
    return lambda x: fn(x.astype(np.float64))


_UNARY = {
    "Acos": _f64(np.arccos),
    "Asin": _f64(np.arcsin),
    "Atan": _f64(np.arctan),
    "Sinh": _f64(np.sinh),
    "Cosh": _f64(np.cosh),
    "Tan": _f64(np.tan),
    "Asinh": _f64(np.arcsinh),
    "Acosh": _f64(np.arccosh),
    "Atanh": _f64(np.arctanh),
    # x * tanh(softplus(x)), softplus computed without overflow.
    "Mish": _f64(lambda x: x * np.tanh(np.logaddexp(0.0, x))),
}
for _name, _fn in _UNARY.items():
    define_op(OpDef(_name, ("x",), ("y",), _unary_infer(True, _name), _in_dtype(_fn), traits=ELEMENTWISE))


def _float_to_bool(name):
    def infer(attrs, types):
        (t,) = types
        require_float(t, name)
        return (TensorType(DType.BOOL, t.shape),)

    return infer


@dataclass(frozen=True)
class IsInfAttrs:
    detect_negative: bool = True
    detect_positive: bool = True


def _isinf(attrs: IsInfAttrs, arrays):
    (x,) = arrays
    xf = x.astype(np.float64)
    return (np.isinf(xf) & (((xf < 0) & attrs.detect_negative) | ((xf > 0) & attrs.detect_positive)),)


define_op(OpDef("IsNaN", ("x",), ("y",), _float_to_bool("IsNaN"), lambda a, xs: (np.isnan(xs[0].astype(np.float64)),),
                traits=ELEMENTWISE))
define_op(OpDef("IsInf", ("x",), ("y",), _float_to_bool("IsInf"), _isinf, attrs=IsInfAttrs, traits=ELEMENTWISE))


def _int_unary_infer(attrs, types):
    (t,) = types
    if not t.dtype.is_int:
        raise OpError(f"BitwiseNot needs an integer input, got {t.dtype}")
    return (t,)


define_op(OpDef("BitwiseNot", ("x",), ("y",), _int_unary_infer, lambda a, xs: (np.invert(xs[0]),),
                traits=ELEMENTWISE))


def _int_binary_infer(name):
    def infer(attrs, types):
        dtype = same_dtype(types, name)
        if not dtype.is_int:
            raise OpError(f"{name} needs integer operands, got {dtype}")
        return (TensorType(dtype, broadcast_shapes(types[0].shape, types[1].shape)),)

    return infer


for _name, _fn in {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or,
                   "BitwiseXor": np.bitwise_xor}.items():
    define_op(OpDef(_name, ("a", "b"), ("c",), _int_binary_infer(_name), _binary_reference(_fn),
                    traits=ELEMENTWISE))


@dataclass(frozen=True)
class BitShiftAttrs:
    direction: str  # "LEFT" or "RIGHT"


def _bitshift_infer(attrs: BitShiftAttrs, types):
    if attrs.direction not in ("LEFT", "RIGHT"):
        raise OpError(f"BitShift direction '{attrs.direction}' is not LEFT or RIGHT")
    dtype = same_dtype(types, "BitShift")
    if not dtype.is_int:
        raise OpError(f"BitShift needs integer operands, got {dtype}")
    return (TensorType(dtype, broadcast_shapes(types[0].shape, types[1].shape)),)


def _bitshift(attrs: BitShiftAttrs, arrays):
    """Right shifts of signed values are arithmetic; left shifts drop bits past the sign bit.
    A shift by a negative amount or by the width or more leaves only the sign fill: -1 for a
    right shift of a negative value, else 0 (ONNX opset 28; C leaves it undefined)."""
    x, y = np.broadcast_arrays(*arrays)
    bits = x.dtype.itemsize * 8
    out_of_range = (y < 0) | (y >= bits)
    amount = np.where(out_of_range, 0, y)
    unsigned = np.dtype(f"u{x.dtype.itemsize}")
    if attrs.direction == "LEFT":
        out = np.left_shift(x.view(unsigned), amount.astype(unsigned)).view(x.dtype)
        fill = np.zeros_like(x)
    else:
        out = np.right_shift(x, amount.astype(x.dtype))
        fill = np.where(x < 0, -1, 0).astype(x.dtype) if x.dtype.kind == "i" else np.zeros_like(x)
    return (np.where(out_of_range, fill, out).astype(x.dtype),)


define_op(OpDef("BitShift", ("x", "y"), ("z",), _bitshift_infer, _bitshift, attrs=BitShiftAttrs,
                traits=ELEMENTWISE))


@dataclass(frozen=True)
class SeluAttrs:
    alpha: float = 1.67326319217681884765625
    gamma: float = 1.05070102214813232421875


@dataclass(frozen=True)
class CeluAttrs:
    alpha: float = 1.0


@dataclass(frozen=True)
class ThresholdAttrs:
    alpha: float = 1.0


@dataclass(frozen=True)
class ShrinkAttrs:
    bias: float = 0.0
    lambd: float = 0.5


def _keep_dtype(fn):
    def reference(attrs, arrays):
        (x,) = arrays
        return (np.asarray(fn(attrs, x.astype(np.float64))).astype(x.dtype),)

    return reference


def _shrink_infer(attrs, types):
    (t,) = types
    if t.dtype is DType.BOOL:
        raise OpError("Shrink does not take bool")
    return (t,)


define_op(OpDef("Selu", ("x",), ("y",), _unary_infer(True, "Selu"), _keep_dtype(
    lambda a, x: a.gamma * np.where(x > 0, x, a.alpha * np.expm1(np.minimum(x, 0)))), attrs=SeluAttrs,
    traits=ELEMENTWISE))
define_op(OpDef("Celu", ("x",), ("y",), _unary_infer(True, "Celu"), _keep_dtype(
    lambda a, x: np.maximum(x, 0) + np.minimum(0, a.alpha * np.expm1(x / a.alpha))),
    attrs=CeluAttrs, traits=ELEMENTWISE))
define_op(OpDef("ThresholdedRelu", ("x",), ("y",), _unary_infer(True, "ThresholdedRelu"), _keep_dtype(
    lambda a, x: np.where(x > a.alpha, x, 0.0)), attrs=ThresholdAttrs, traits=ELEMENTWISE))
define_op(OpDef("Shrink", ("x",), ("y",), _shrink_infer, _keep_dtype(
    lambda a, x: np.where(x < -a.lambd, x + a.bias, np.where(x > a.lambd, x - a.bias, 0.0))),
    attrs=ShrinkAttrs, traits=ELEMENTWISE))


def _prelu_infer(attrs, types):
    x, slope = types
    dtype = same_dtype(types, "PRelu")
    if dtype is DType.BOOL:
        raise OpError("PRelu does not take bool")
    shape = broadcast_shapes(x.shape, slope.shape)
    if shape != x.shape:
        raise OpError(f"PRelu slope {list(slope.shape)} must broadcast to the input {list(x.shape)}")
    return (x,)


def _prelu(attrs, arrays):
    x, slope = arrays
    return (np.where(x < 0, x * slope, x).astype(x.dtype),)


define_op(OpDef("PRelu", ("x", "slope"), ("y",), _prelu_infer, _prelu, traits=ELEMENTWISE))



@dataclass(frozen=True)
class BitCastAttrs:
    to: DType


def _bitcast_infer(attrs: BitCastAttrs, types):
    (t,) = types
    if t.dtype.itemsize != attrs.to.itemsize or t.dtype.is_narrow or attrs.to.is_narrow:
        raise OpError(f"BitCast from {t.dtype} to {attrs.to} needs two byte-sized types of one width")
    return (t.with_dtype(attrs.to),)


def _bitcast(attrs: BitCastAttrs, arrays):
    """The same bytes read as another type (ONNX specifies little endian, as NumPy's native
    order is on every host Ember targets)."""
    (x,) = arrays
    return (np.array(x, order="C").view(attrs.to.numpy),)


define_op(OpDef("BitCast", ("x",), ("y",), _bitcast_infer, _bitcast, attrs=BitCastAttrs, traits=ELEMENTWISE))

__all__ = ["BitCastAttrs", "BitShiftAttrs", "CeluAttrs", "IsInfAttrs", "SeluAttrs", "ShrinkAttrs", "ThresholdAttrs"]
