"""Elementwise ops: unary math, binary arithmetic with broadcasting, comparisons and logic,
Where, Clip, Cast and the parameterized activations. Each family shares one inference rule,
so a new elementwise op is one line in a table."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ember.ops.math_util import erf
from ember.ops.registry import NoAttrs, OpDef, OpError, define_op
from ember.ops.shape_util import broadcast_shapes, require_float, same_dtype
from ember.types import DType, TensorType

ELEMENTWISE = frozenset({"elementwise"})


def _unary_infer(float_only: bool, name: str):
    def infer(attrs, types):
        (t,) = types
        if float_only:
            require_float(t, name)
        elif t.dtype is DType.BOOL:
            raise OpError(f"{name} does not take bool")
        return (TensorType(t.dtype, t.shape),)

    return infer


def _in_dtype(fn: Callable[[np.ndarray], np.ndarray]):
    """Wraps a NumPy function so its result keeps the input's element type."""

    def reference(attrs, arrays):
        (x,) = arrays
        return (np.asarray(fn(x)).astype(x.dtype, copy=False),)

    return reference


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so exp never overflows.
    xf = x.astype(np.float64)
    out = np.empty_like(xf)
    pos = xf >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-xf[pos]))
    ex = np.exp(xf[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


_UNARY_FLOAT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
    "Sigmoid": _sigmoid,
    "Tanh": np.tanh,
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Erf": lambda x: erf(x.astype(np.float64)),
    "Reciprocal": lambda x: np.reciprocal(x),
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Round": np.round,  # round half to even, as ONNX specifies
    "Sin": np.sin,
    "Cos": np.cos,
    "Softplus": lambda x: np.logaddexp(0, x.astype(np.float64)),
    "Softsign": lambda x: x / (1 + np.abs(x)),
}
_UNARY_NUMERIC: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Neg": np.negative,
    "Abs": np.abs,
    "Sign": np.sign,
}

for _name, _fn in _UNARY_FLOAT.items():
    define_op(OpDef(_name, ("x",), ("y",), _unary_infer(True, _name), _in_dtype(_fn), traits=ELEMENTWISE))
for _name, _fn in _UNARY_NUMERIC.items():
    define_op(OpDef(_name, ("x",), ("y",), _unary_infer(False, _name), _in_dtype(_fn), traits=ELEMENTWISE))


def _not_infer(attrs, types):
    (t,) = types
    if t.dtype is not DType.BOOL:
        raise OpError(f"Not needs bool, got {t.dtype}")
    return (t,)


define_op(OpDef("Not", ("x",), ("y",), _not_infer, lambda a, xs: (np.logical_not(xs[0]),), traits=ELEMENTWISE))


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # Integer division truncates toward zero (C semantics, as ONNX Runtime does): the floor
    # quotient, one up where it was rounded down (a remainder and the signs differ). Not
    # through |a| // |b|, which wraps for the type's minimum (|INT64_MIN| is INT64_MIN: 10 / it
    # gave -1, not 0). The minimum over -1 wraps to the minimum, as the cpu backend's does.
    if np.any(b == 0):
        raise OpError("integer division by zero")
    with np.errstate(over="ignore"):
        q, r = np.divmod(a, b)
    return np.where((r != 0) & ((a < 0) != (b < 0)), q + 1, q).astype(a.dtype)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        return _int_div(a, b)
    return a / b


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.mod(a, b)


_BINARY_ARITH: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": _div,
    "Max": np.maximum,
    "Min": np.minimum,
    "Mod": _mod,
}
_COMMUTATIVE = {"Add", "Mul", "Max", "Min"}
_COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Equal": np.equal,
    "Less": np.less,
    "LessOrEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal,
}
_LOGIC: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "And": np.logical_and,
    "Or": np.logical_or,
    "Xor": np.logical_xor,
}


def _binary_infer(name: str, result: str):
    """result: 'same' keeps the operand type, 'bool' gives bool; logic ops need bool inputs."""

    def infer(attrs, types):
        dtype = same_dtype(types, name)
        if name in _LOGIC and dtype is not DType.BOOL:
            raise OpError(f"{name} needs bool operands, got {dtype}")
        if name in _BINARY_ARITH and dtype is DType.BOOL:
            raise OpError(f"{name} does not take bool operands")
        shape = broadcast_shapes(types[0].shape, types[1].shape)
        return (TensorType(DType.BOOL if result == "bool" else dtype, shape),)

    return infer


def _binary_reference(fn):
    def reference(attrs, arrays):
        a, b = arrays
        return (np.asarray(fn(a, b)),)

    return reference


for _name, _binary_fn in _BINARY_ARITH.items():
    _traits = ELEMENTWISE | ({"commutative"} if _name in _COMMUTATIVE else set())
    define_op(OpDef(_name, ("a", "b"), ("c",), _binary_infer(_name, "same"), _binary_reference(_binary_fn),
                    traits=frozenset(_traits)))
for _name, _binary_fn in {**_COMPARE, **_LOGIC}.items():
    define_op(OpDef(_name, ("a", "b"), ("c",), _binary_infer(_name, "bool"), _binary_reference(_binary_fn),
                    traits=ELEMENTWISE))


def _pow_infer(attrs, types):
    base, exponent = types
    if base.dtype is DType.BOOL or exponent.dtype is DType.BOOL:
        raise OpError("Pow does not take bool operands")
    return (TensorType(base.dtype, broadcast_shapes(base.shape, exponent.shape)),)


def _pow_reference(attrs, arrays):
    base, exponent = arrays
    if base.dtype.kind == "f":
        return (np.power(base, exponent.astype(base.dtype)),)
    # An integer base: to an integral power >= 0 exactly, wrapping modulo 2^64 then to the
    # base's type (as integer multiplication wraps); to a fractional or negative power in
    # double, truncated (2 ** -0.25 is 0), as ONNX Runtime does. Decided per element.
    e = np.broadcast_to(exponent.astype(np.float64), np.broadcast_shapes(base.shape, exponent.shape))
    exact = (e >= 0) & (e == np.floor(e)) & (e < 2.0 ** 64)
    with np.errstate(all="ignore"):
        powers = np.where(exact, e, 0).astype(np.uint64)
        wrapped = np.power(base.astype(np.int64).astype(np.uint64), powers)  # uint64 arithmetic wraps
        inexact = np.trunc(np.power(base.astype(np.float64), np.where(exact, 0.0, e)))
        return (np.where(exact, wrapped.astype(base.dtype), inexact.astype(base.dtype)),)


define_op(OpDef("Pow", ("base", "exponent"), ("y",), _pow_infer, _pow_reference, traits=ELEMENTWISE))


def _where_infer(attrs, types):
    cond, x, y = types
    if cond.dtype is not DType.BOOL:
        raise OpError(f"Where needs a bool condition, got {cond.dtype}")
    dtype = same_dtype([x, y], "Where")
    return (TensorType(dtype, broadcast_shapes(cond.shape, x.shape, y.shape)),)


def _where_reference(attrs, arrays):
    cond, x, y = arrays
    return (np.where(cond, x, y),)


define_op(OpDef("Where", ("condition", "x", "y"), ("z",), _where_infer, _where_reference, traits=ELEMENTWISE))


@dataclass(frozen=True)
class ClipAttrs:
    """Bounds as numbers; None means unbounded on that side."""

    min: float | None = None
    max: float | None = None


def _clip_infer(attrs: ClipAttrs, types):
    (t,) = types
    if t.dtype is DType.BOOL:
        raise OpError("Clip does not take bool")
    return (t,)


def _clip_reference(attrs: ClipAttrs, arrays):
    (x,) = arrays
    y = x
    if attrs.min is not None:
        y = np.maximum(y, np.asarray(attrs.min).astype(x.dtype))
    if attrs.max is not None:
        y = np.minimum(y, np.asarray(attrs.max).astype(x.dtype))
    return (y,)


define_op(OpDef("Clip", ("x",), ("y",), _clip_infer, _clip_reference, attrs=ClipAttrs, traits=ELEMENTWISE))


@dataclass(frozen=True)
class CastAttrs:
    """saturate: casts to float8 clamp out-of-range values (and infinities) to the largest
    finite value instead of giving inf or NaN (ONNX's default).

    Float to a (byte or wider) integer truncates toward zero. Where ONNX leaves the result
    undefined (NaN, and values outside the integer type), Ember defines it, the same on every
    backend and machine: NaN gives 0 and the rest saturate to the type's limits (as Rust's `as`
    and WebAssembly's trunc_sat do). NumPy and ONNX Runtime give whatever the host's convert
    instruction gives there (INT_MIN on x86)."""

    to: DType
    saturate: bool = True


def _cast_reference(attrs: CastAttrs, arrays):
    (x,) = arrays
    target = attrs.to.numpy
    if DType.from_numpy(x.dtype).is_narrow_float and not attrs.to.is_narrow and target.kind in "iu":
        # A float8/float4 to a byte-or-wider integer: through float32, saturating like any float
        return (saturating_float_to_int(x.astype(np.float32), target),)
    if attrs.to.is_narrow or DType.from_numpy(x.dtype).is_narrow:
        # ml_dtypes converts with round-to-nearest-even, as ONNX specifies.
        if attrs.to.is_narrow_float and attrs.saturate and attrs.to is not DType.FLOAT4E2M1:
            info = ml_dtypes.finfo(target)
            wide = x.astype(np.float32) if x.dtype.itemsize < 4 or x.dtype.kind != "f" else x
            return (np.clip(wide, float(info.min), float(info.max)).astype(target),)
        source = DType.from_numpy(x.dtype)
        if source.is_narrow and attrs.to.is_narrow and source.is_int and attrs.to.is_int:
            # ml_dtypes has no cast between two sub-byte integer types (uint4 -> int4): through
            # int32, which wraps the value as a direct cast would (15 -> -1), as ONNX Runtime does.
            return (x.astype(np.int32).astype(target),)
        return (x.astype(target),)
    if x.dtype.kind == "f" and target.kind in "iu":
        return (saturating_float_to_int(x, target),)
    return (x.astype(target),)


def saturating_float_to_int(x: np.ndarray, target: np.dtype) -> np.ndarray:
    """trunc(x) as `target`; NaN gives 0 and values past the type's range its limits (see
    CastAttrs)."""
    info = np.iinfo(target)
    wide = np.trunc(x.astype(np.float64))
    # float(info.max) + 1 is a power of two, exact in float64: the first value past the range
    past = float(info.max) + 1.0
    inside = (wide >= float(info.min)) & (wide < past)
    out = np.where(inside, wide, 0.0).astype(target)
    out[wide >= past] = info.max
    out[wide < float(info.min)] = info.min
    return out


define_op(OpDef("Cast", ("x",), ("y",), lambda a, ts: (ts[0].with_dtype(a.to),), _cast_reference,
                attrs=CastAttrs, traits=ELEMENTWISE))


@dataclass(frozen=True)
class AlphaAttrs:
    alpha: float = 0.01


@dataclass(frozen=True)
class AlphaBetaAttrs:
    alpha: float = 0.2
    beta: float = 0.5


def _float_unary_infer(name):
    return _unary_infer(True, name)


def _leaky_relu(attrs: AlphaAttrs, arrays):
    (x,) = arrays
    return (np.where(x >= 0, x, x * x.dtype.type(attrs.alpha)),)


def _elu(attrs: AlphaAttrs, arrays):
    (x,) = arrays
    return (np.where(x >= 0, x, (np.expm1(x.astype(np.float64)) * attrs.alpha).astype(x.dtype)),)


def _hard_sigmoid(attrs: AlphaBetaAttrs, arrays):
    (x,) = arrays
    return (np.clip(x * x.dtype.type(attrs.alpha) + x.dtype.type(attrs.beta), 0, 1).astype(x.dtype),)


define_op(OpDef("LeakyRelu", ("x",), ("y",), _float_unary_infer("LeakyRelu"), _leaky_relu,
                attrs=AlphaAttrs, traits=ELEMENTWISE))
define_op(OpDef("Elu", ("x",), ("y",), _float_unary_infer("Elu"), _elu, attrs=AlphaAttrs, traits=ELEMENTWISE))
define_op(OpDef("HardSigmoid", ("x",), ("y",), _float_unary_infer("HardSigmoid"), _hard_sigmoid,
                attrs=AlphaBetaAttrs, traits=ELEMENTWISE))

__all__ = ["AlphaAttrs", "AlphaBetaAttrs", "CastAttrs", "ClipAttrs", "NoAttrs"]
