"""Reductions: ReduceSum/Max/Min/Prod (primitives; the other ONNX reductions are lowered onto
them at import) and ArgMax/ArgMin."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import normalize_axes, normalize_axis, require_float
from ember.types import DType, TensorType


@dataclass(frozen=True)
class ReduceAttrs:
    """axes: normalized, sorted axes to reduce (empty reduces nothing: ONNX's
    noop_with_empty_axes is resolved at import); keepdims keeps them as size 1."""

    axes: tuple[int, ...]
    keepdims: bool = True


def _reduce_infer(name: str, float_only: bool):
    def infer(attrs: ReduceAttrs, types):
        (t,) = types
        if float_only:
            require_float(t, name)
        elif t.dtype is DType.BOOL:
            raise OpError(f"{name} does not take bool")
        axes = normalize_axes(attrs.axes, t.rank)
        if attrs.keepdims:
            shape = tuple(1 if i in axes else d for i, d in enumerate(t.shape))
        else:
            shape = tuple(d for i, d in enumerate(t.shape) if i not in axes)
        return (t.with_shape(shape),)

    return infer


def _reducer(fn, empty_ok: bool = True):
    def reference(attrs: ReduceAttrs, arrays):
        (x,) = arrays
        axes = normalize_axes(attrs.axes, x.ndim)
        if not empty_ok and any(x.shape[a] == 0 for a in axes):
            raise OpError("cannot reduce an empty axis")
        out = fn(x, axes)
        if attrs.keepdims:
            out = np.reshape(out, tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
        return (np.asarray(out).astype(x.dtype),)

    return reference


def _f64(fn):
    """Accumulate low-precision floats in float64, as a careful kernel would."""
    return lambda x, axes: fn(x.astype(np.float64) if x.dtype.kind == "f" else x, axes)


_REDUCTIONS = {
    # name: (fn(x, axes), primitive, float_only, empty_ok)
    "ReduceSum": (_f64(lambda x, a: np.sum(x, axis=a)), True, False, True),
    "ReduceMax": (lambda x, a: np.max(x, axis=a), True, False, False),
    "ReduceMin": (lambda x, a: np.min(x, axis=a), True, False, False),
    "ReduceProd": (_f64(lambda x, a: np.prod(x, axis=a)), True, False, True),
    "ReduceMean": (_f64(lambda x, a: np.mean(x, axis=a)), False, False, False),
    "ReduceL1": (_f64(lambda x, a: np.sum(np.abs(x), axis=a)), False, False, True),
    "ReduceL2": (_f64(lambda x, a: np.sqrt(np.sum(np.square(x), axis=a))), False, False, True),
    "ReduceSumSquare": (_f64(lambda x, a: np.sum(np.square(x), axis=a)), False, False, True),
    "ReduceLogSum": (_f64(lambda x, a: np.log(np.sum(x, axis=a))), False, True, True),
    "ReduceLogSumExp": (_f64(lambda x, a: np.log(np.sum(np.exp(x), axis=a))), False, True, True),
}

for _name, (_fn, _primitive, _float_only, _empty_ok) in _REDUCTIONS.items():
    define_op(OpDef(_name, ("x",), ("y",), _reduce_infer(_name, _float_only), _reducer(_fn, _empty_ok),
                    attrs=ReduceAttrs, primitive=_primitive, traits=frozenset({"reduction"})))


@dataclass(frozen=True)
class ArgReduceAttrs:
    axis: int = 0
    keepdims: bool = True
    select_last_index: bool = False


def _arg_infer(attrs: ArgReduceAttrs, types):
    (t,) = types
    axis = normalize_axis(attrs.axis, t.rank)
    if t.shape[axis] == 0:
        raise OpError("cannot take the arg of an empty axis")
    shape = list(t.shape)
    if attrs.keepdims:
        shape[axis] = 1
    else:
        del shape[axis]
    return (TensorType(DType.INT64, tuple(shape)),)


def _arg_reference(fn):
    def reference(attrs: ArgReduceAttrs, arrays):
        (x,) = arrays
        axis = normalize_axis(attrs.axis, x.ndim)
        if attrs.select_last_index:
            flipped = np.flip(x, axis)
            out = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            out = fn(x, axis=axis)
        if attrs.keepdims:
            out = np.expand_dims(out, axis)
        return (out.astype(np.int64),)

    return reference


define_op(OpDef("ArgMax", ("x",), ("y",), _arg_infer, _arg_reference(np.argmax), attrs=ArgReduceAttrs))
define_op(OpDef("ArgMin", ("x",), ("y",), _arg_infer, _arg_reference(np.argmin), attrs=ArgReduceAttrs))
