"""Fused ops that the graph optimizer forms and backends may accept or refuse.

Both compute `act(core + bias + residual)`: FusedConv's core is a Conv, FullyConnected's is
x @ w with a 2-D weight [K, N] (x may have leading batch axes). The epilogue activation is an
attribute: none, relu, clip (alpha=min, beta=max), leaky_relu (alpha), sigmoid, tanh or
hard_sigmoid (alpha, beta). They are not primitives: a backend that does not run them natively
gets them lowered back into their parts (see lowering/fused.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.ops.elementwise import _sigmoid
from ember.ops.nn import ConvAttrs, _conv, _conv_infer
from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import require_float, same_dtype
from ember.types import TensorType

ACTIVATIONS = ("none", "relu", "clip", "leaky_relu", "sigmoid", "tanh", "hard_sigmoid")


def apply_activation(y: np.ndarray, activation: str, alpha: float, beta: float) -> np.ndarray:
    if activation == "none":
        return y
    if activation == "relu":
        return np.maximum(y, 0)
    if activation == "clip":
        return np.minimum(np.maximum(y, alpha), beta)
    if activation == "leaky_relu":
        return np.where(y >= 0, y, y * alpha)
    if activation == "sigmoid":
        return _sigmoid(y)
    if activation == "tanh":
        return np.tanh(y)
    if activation == "hard_sigmoid":
        return np.clip(y * alpha + beta, 0, 1)
    raise OpError(f"unknown fused activation '{activation}'")


def _check_activation(activation: str) -> None:
    if activation not in ACTIVATIONS:
        raise OpError(f"fused activation '{activation}' is not one of {', '.join(ACTIVATIONS)}")


@dataclass(frozen=True)
class FusedConvAttrs:
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]
    group: int = 1
    activation: str = "none"
    alpha: float = 0.0
    beta: float = 0.0

    @property
    def conv(self) -> ConvAttrs:
        return ConvAttrs(self.strides, self.pads, self.dilations, self.group)


def _fused_conv_infer(attrs: FusedConvAttrs, types):
    x, w, b, residual = types
    _check_activation(attrs.activation)
    (y,) = _conv_infer(attrs.conv, [x, w, b])
    if residual is not None and residual != y:
        raise OpError(f"FusedConv residual {residual} must match the result {y}")
    return (y,)


def _fused_conv(attrs: FusedConvAttrs, arrays):
    x, w, b, residual = arrays
    (y,) = _conv(attrs.conv, [x, w, b])
    y = y.astype(np.float64)
    if residual is not None:
        y = y + residual
    return (apply_activation(y, attrs.activation, attrs.alpha, attrs.beta).astype(x.dtype),)


define_op(OpDef("FusedConv", ("x", "w", "b?", "residual?"), ("y",), _fused_conv_infer, _fused_conv,
                attrs=FusedConvAttrs, primitive=False))


@dataclass(frozen=True)
class FullyConnectedAttrs:
    activation: str = "none"
    alpha: float = 0.0
    beta: float = 0.0


def _fc_infer(attrs: FullyConnectedAttrs, types):
    x, w, b, residual = types
    _check_activation(attrs.activation)
    same_dtype(types, "FullyConnected")
    require_float(x, "FullyConnected")
    if x.rank < 2 or w.rank != 2 or x.shape[-1] != w.shape[0]:
        raise OpError(f"FullyConnected needs x [..., K] and w [K, N], got {x} and {w}")
    y = TensorType(x.dtype, x.shape[:-1] + (w.shape[1],))
    if b is not None and b.shape != (w.shape[1],):
        raise OpError(f"FullyConnected bias must have shape [{w.shape[1]}], got {list(b.shape)}")
    if residual is not None and residual != y:
        raise OpError(f"FullyConnected residual {residual} must match the result {y}")
    return (y,)


def _fc(attrs: FullyConnectedAttrs, arrays):
    x, w, b, residual = arrays
    y = x.astype(np.float64) @ w.astype(np.float64)
    if b is not None:
        y = y + b
    if residual is not None:
        y = y + residual
    return (apply_activation(y, attrs.activation, attrs.alpha, attrs.beta).astype(x.dtype),)


define_op(OpDef("FullyConnected", ("x", "w", "b?", "residual?"), ("y",), _fc_infer, _fc,
                attrs=FullyConnectedAttrs, primitive=False))
