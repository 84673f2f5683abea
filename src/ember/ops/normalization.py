"""Normalizations: Softmax, LogSoftmax and LayerNormalization (not primitives: lowered onto
reductions and elementwise ops where a backend has no kernel for them), and the primitives
InstanceNormalization, GroupNormalization, LRN, MeanVarianceNormalization, LpNormalization,
RMSNormalization and Hardmax. (BatchNormalization, folded into convolutions, is in nn.py.)
Statistics are computed in float64 and the result rounded once to the input type."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import broadcast_shapes, normalize_axes, normalize_axis, require_float
from ember.types import TensorType


def _channel_param_check(op: str, x: TensorType, params) -> None:
    for name, t in params:
        if t is not None and t.shape != (x.shape[1],):
            raise OpError(f"{op} {name} must have shape [{x.shape[1]}], got {list(t.shape)}")


@dataclass(frozen=True)
class EpsilonAttrs:
    epsilon: float = 1e-5


def _instance_norm_infer(attrs: EpsilonAttrs, types):
    x, scale, bias = types
    require_float(x, "InstanceNormalization")
    if x.rank < 3:
        raise OpError(f"InstanceNormalization needs rank >= 3, got {x}")
    _channel_param_check("InstanceNormalization", x, (("scale", scale), ("bias", bias)))
    return (x,)


def _normalize(x: np.ndarray, axes, epsilon: float) -> np.ndarray:
    mean = x.mean(axis=axes, keepdims=True)
    var = np.square(x - mean).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon)


def _per_channel(v: np.ndarray, rank: int) -> np.ndarray:
    return v.astype(np.float64).reshape((1, -1) + (1,) * (rank - 2))


def _instance_norm(attrs: EpsilonAttrs, arrays):
    x, scale, bias = arrays
    y = _normalize(x.astype(np.float64), tuple(range(2, x.ndim)), attrs.epsilon)
    return ((y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)).astype(x.dtype),)


define_op(OpDef("InstanceNormalization", ("x", "scale", "bias"), ("y",), _instance_norm_infer, _instance_norm,
                attrs=EpsilonAttrs))


@dataclass(frozen=True)
class GroupNormAttrs:
    """Channels split into num_groups groups, each normalized over its channels and the
    spatial axes; scale and bias are per channel."""

    num_groups: int
    epsilon: float = 1e-5


def _group_norm_infer(attrs: GroupNormAttrs, types):
    x, scale, bias = types
    require_float(x, "GroupNormalization")
    if x.rank < 3 or attrs.num_groups < 1 or x.shape[1] % attrs.num_groups:
        raise OpError(f"GroupNormalization num_groups {attrs.num_groups} does not divide the channels of {x}")
    _channel_param_check("GroupNormalization", x, (("scale", scale), ("bias", bias)))
    return (x,)


def _group_norm(attrs: GroupNormAttrs, arrays):
    x, scale, bias = arrays
    grouped = x.astype(np.float64).reshape((x.shape[0], attrs.num_groups, -1))
    y = _normalize(grouped, (2,), attrs.epsilon).reshape(x.shape)
    return ((y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)).astype(x.dtype),)


define_op(OpDef("GroupNormalization", ("x", "scale", "bias"), ("y",), _group_norm_infer, _group_norm,
                attrs=GroupNormAttrs))


@dataclass(frozen=True)
class LRNAttrs:
    size: int
    alpha: float = 1e-4
    beta: float = 0.75
    bias: float = 1.0


def _lrn_infer(attrs: LRNAttrs, types):
    (x,) = types
    require_float(x, "LRN")
    if x.rank < 3 or attrs.size < 1:
        raise OpError(f"LRN needs rank >= 3 and size >= 1, got {x} and size {attrs.size}")
    if not all(math.isfinite(v) for v in (attrs.alpha, attrs.beta, attrs.bias)):
        # An infinite alpha makes the base -inf or inf * 0: C's pow and NumPy's ** (the
        # reference) disagree there (pow(-inf, 0.5) is +inf, NumPy's -inf ** 0.5 NaN).
        raise OpError(f"LRN alpha {attrs.alpha}, beta {attrs.beta} and bias {attrs.bias} must be finite")
    return (x,)


def _lrn(attrs: LRNAttrs, arrays):
    """Square sums over channels [c - floor((size-1)/2), c + ceil((size-1)/2)]."""
    (x,) = arrays
    xf = x.astype(np.float64)
    channels = x.shape[1]
    before, after = (attrs.size - 1) // 2, attrs.size // 2
    squares = np.square(xf)
    sums = np.zeros_like(xf)
    for c in range(channels):
        sums[:, c] = squares[:, max(0, c - before):min(channels, c + after + 1)].sum(axis=1)
    return ((xf / (attrs.bias + attrs.alpha / attrs.size * sums) ** attrs.beta).astype(x.dtype),)


define_op(OpDef("LRN", ("x",), ("y",), _lrn_infer, _lrn, attrs=LRNAttrs))


@dataclass(frozen=True)
class AxesAttrs:
    axes: tuple[int, ...] = (0, 2, 3)


# ONNX's MeanVarianceNormalization divides by (std + 1e-9).
MVN_EPSILON = 1e-9


def _mvn_infer(attrs: AxesAttrs, types):
    (x,) = types
    require_float(x, "MeanVarianceNormalization")
    normalize_axes(attrs.axes, x.rank)
    return (x,)


def _mvn(attrs: AxesAttrs, arrays):
    (x,) = arrays
    xf = x.astype(np.float64)
    axes = normalize_axes(attrs.axes, x.ndim)
    mean = xf.mean(axis=axes, keepdims=True)
    std = np.sqrt(np.maximum(np.square(xf).mean(axis=axes, keepdims=True) - np.square(mean), 0.0))
    return (((xf - mean) / (std + MVN_EPSILON)).astype(x.dtype),)


define_op(OpDef("MeanVarianceNormalization", ("x",), ("y",), _mvn_infer, _mvn, attrs=AxesAttrs))


@dataclass(frozen=True)
class LpNormAttrs:
    axis: int = -1
    p: int = 2


def _lp_norm_infer(attrs: LpNormAttrs, types):
    (x,) = types
    require_float(x, "LpNormalization")
    normalize_axis(attrs.axis, x.rank)
    if attrs.p not in (1, 2):
        raise OpError(f"LpNormalization p must be 1 or 2, got {attrs.p}")
    return (x,)


def _lp_norm(attrs: LpNormAttrs, arrays):
    (x,) = arrays
    xf = x.astype(np.float64)
    norm = np.sum(np.abs(xf) ** attrs.p, axis=attrs.axis, keepdims=True) ** (1.0 / attrs.p)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(norm == 0, 0.0, xf / norm)  # a zero vector stays zero
    return (y.astype(x.dtype),)


define_op(OpDef("LpNormalization", ("x",), ("y",), _lp_norm_infer, _lp_norm, attrs=LpNormAttrs))


@dataclass(frozen=True)
class RMSNormAttrs:
    """Normalizes over axes [axis, rank) by the root mean square; scale broadcasts."""

    axis: int = -1
    epsilon: float = 1e-5


def _rms_norm_infer(attrs: RMSNormAttrs, types):
    x, scale = types
    require_float(x, "RMSNormalization")
    normalize_axis(attrs.axis, x.rank)
    if broadcast_shapes(x.shape, scale.shape) != x.shape:
        raise OpError(f"RMSNormalization scale {scale} does not broadcast to the input {x}")
    return (x,)


def _rms_norm(attrs: RMSNormAttrs, arrays):
    x, scale = arrays
    xf = x.astype(np.float64)
    axes = tuple(range(normalize_axis(attrs.axis, x.ndim), x.ndim))
    rms = np.sqrt(np.square(xf).mean(axis=axes, keepdims=True) + attrs.epsilon)
    return ((xf / rms * scale.astype(np.float64)).reshape(x.shape).astype(x.dtype),)


define_op(OpDef("RMSNormalization", ("x", "scale"), ("y",), _rms_norm_infer, _rms_norm, attrs=RMSNormAttrs))


@dataclass(frozen=True)
class HardmaxAttrs:
    axis: int = -1


def _hardmax_infer(attrs: HardmaxAttrs, types):
    (x,) = types
    normalize_axis(attrs.axis, x.rank)
    return (x,)


def _hardmax(attrs: HardmaxAttrs, arrays):
    """1 at the first maximum along the axis, 0 elsewhere."""
    (x,) = arrays
    axis = normalize_axis(attrs.axis, x.ndim)
    if x.size == 0:  # nothing to mark (np.argmax refuses an empty axis)
        return (np.zeros_like(x),)
    first = np.expand_dims(np.argmax(x, axis=axis), axis)
    positions = np.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - axis - 1))
    return ((positions == first).astype(x.dtype),)


define_op(OpDef("Hardmax", ("x",), ("y",), _hardmax_infer, _hardmax, attrs=HardmaxAttrs))

__all__ = ["AxesAttrs", "EpsilonAttrs", "GroupNormAttrs", "HardmaxAttrs", "LRNAttrs", "LpNormAttrs", "RMSNormAttrs"]


@dataclass(frozen=True)
class SoftmaxAttrs:
    axis: int = -1


def _softmax_infer(name):
    def infer(attrs: SoftmaxAttrs, types):
        (t,) = types
        require_float(t, name)
        normalize_axis(attrs.axis, t.rank)
        return (t,)

    return infer


def _softmax(attrs: SoftmaxAttrs, arrays):
    (x,) = arrays
    if x.size == 0:  # nothing to normalise (NumPy's max of an empty axis fails)
        return (x.copy(),)
    xf = x.astype(np.float64)
    e = np.exp(xf - np.max(xf, axis=attrs.axis, keepdims=True))
    return ((e / np.sum(e, axis=attrs.axis, keepdims=True)).astype(x.dtype),)


def _log_softmax(attrs: SoftmaxAttrs, arrays):
    (x,) = arrays
    if x.size == 0:
        return (x.copy(),)
    xf = x.astype(np.float64)
    shifted = xf - np.max(xf, axis=attrs.axis, keepdims=True)
    return ((shifted - np.log(np.sum(np.exp(shifted), axis=attrs.axis, keepdims=True))).astype(x.dtype),)


define_op(OpDef("Softmax", ("x",), ("y",), _softmax_infer("Softmax"), _softmax, attrs=SoftmaxAttrs,
                primitive=False))
define_op(OpDef("LogSoftmax", ("x",), ("y",), _softmax_infer("LogSoftmax"), _log_softmax,
                attrs=SoftmaxAttrs, primitive=False))


@dataclass(frozen=True)
class LayerNormAttrs:
    """Normalizes over axes [axis, rank); scale and bias broadcast over those axes."""

    axis: int = -1
    epsilon: float = 1e-5


def _layernorm_infer(attrs: LayerNormAttrs, types):
    x, scale, bias = types
    require_float(x, "LayerNormalization")
    axis = normalize_axis(attrs.axis, x.rank)
    tail = x.shape[axis:]
    for operand, t in (("scale", scale), ("bias", bias)):
        # Unidirectional broadcast onto the normalized axes: each dim 1 or equal to x's.
        fits = t is None or (t.dtype == x.dtype and t.rank <= len(tail) and all(
            d in (1, full) for d, full in zip(t.shape, tail[len(tail) - t.rank:], strict=True)))
        if not fits:
            raise OpError(f"LayerNormalization {operand} {t} does not broadcast onto the normalized axes "
                          f"{list(tail)} of input {x} (axis {axis})")
    return (x,)


def _layernorm(attrs: LayerNormAttrs, arrays):
    x, scale, bias = arrays
    axes = tuple(range(normalize_axis(attrs.axis, x.ndim), x.ndim))
    xf = x.astype(np.float64)
    mean = xf.mean(axis=axes, keepdims=True)
    var = np.square(xf - mean).mean(axis=axes, keepdims=True)
    y = (xf - mean) / np.sqrt(var + attrs.epsilon) * scale
    if bias is not None:
        y = y + bias
    return (y.astype(x.dtype),)


define_op(OpDef("LayerNormalization", ("x", "scale", "bias?"), ("y",), _layernorm_infer, _layernorm,
                attrs=LayerNormAttrs, primitive=False))
