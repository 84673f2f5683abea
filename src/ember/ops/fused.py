"""Fused ops that the graph optimizer forms and backends may accept or refuse.

Both compute `act(core + bias + residual)`: FusedConv's core is a Conv, FullyConnected's is
x @ w with a 2-D weight [K, N] (x may have leading batch axes). The epilogue activation is an
attribute: none, relu, clip (alpha=min, beta=max), leaky_relu (alpha), sigmoid, tanh,
hard_sigmoid (alpha, beta), gelu (the erf form), hard_swish (alpha * hardswish(y) + beta: a
scalar Mul and Add after it fold in, as PP-LCNet's learnable affine blocks have) or silu.
They are not primitives: a backend that does not run them natively gets them lowered back
into their parts (see lowering/fused.py).

ACTIVATION_TABLE is the one definition of that vocabulary: each activation's attribute
name, NumPy function, graph op (what fuse-activations absorbs and lowering/fused.py emits)
and C enum (codegen/c_constants.py renders it into the kernel library's ember_config.h)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember.ops.activations import GeluAttrs, gelu_reference, hard_swish_reference
from ember.ops.elementwise import AlphaAttrs, AlphaBetaAttrs, ClipAttrs, _sigmoid
from ember.ops.layouts import channels_last, infer_channels_last, reference_channels_last
from ember.ops.nn import ConvAttrs, _conv, _conv_infer
from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import require_float, same_dtype
from ember.types import TensorType

# An activation in the fused ops' terms: (activation name, alpha, beta).
Epilogue = tuple[str, float, float]


def _never(alpha: float, beta: float) -> bool:
    return False


def _always(alpha: float, beta: float) -> bool:
    return True


def _no_params(attrs: Any) -> tuple[float, float]:
    return 0.0, 0.0


@dataclass(frozen=True)
class Activation:
    """One epilogue activation of FusedConv and FullyConnected, in every form it takes:

    name       the `activation` attribute in the IR (activation="relu")
    code       its value in the C enum of ember_config.h (ember_epilogue.act), named c_enum
    op         the graph op it fuses and unfuses to (None for "none")
    reference  the NumPy function of (y, alpha, beta)
    params     the (alpha, beta) of a node of `op` from its attributes, or None when that
               node does not fuse as this activation
    op_attrs   the attributes of `op` for (alpha, beta) (None: the op has no attributes)
    non_negative  whether its results are never negative (NaN aside) for (alpha, beta)
    affine     alpha and beta scale and shift the op's result (alpha * op(y) + beta): the op
               alone is (1, 0), and a Mul or Add by a scalar after it folds into them"""

    name: str
    code: int
    op: str | None
    reference: Callable[[np.ndarray, float, float], np.ndarray]
    params: Callable[[Any], tuple[float, float] | None] = field(default=_no_params, repr=False)
    op_attrs: Callable[[float, float], Any] | None = field(default=None, repr=False)
    non_negative: Callable[[float, float], bool] = field(default=_never, repr=False)
    affine: bool = False

    @property
    def c_enum(self) -> str:
        """The C enum identifier: EMBER_ACT_<NAME>."""
        return f"EMBER_ACT_{self.name.upper()}"

    def __call__(self, y: np.ndarray, alpha: float, beta: float) -> np.ndarray:
        return self.reference(y, alpha, beta)


def _clip_params(attrs: ClipAttrs) -> tuple[float, float] | None:
    # Clip with both bounds; Clip(min=0) alone fuses as relu (see _relu_params).
    if attrs.min is None or attrs.max is None:
        return None
    return float(attrs.min), float(attrs.max)


ACTIVATION_TABLE: tuple[Activation, ...] = (
    Activation("none", 0, None, lambda y, alpha, beta: y, non_negative=_never),
    Activation("relu", 1, "Relu", lambda y, alpha, beta: np.maximum(y, 0), non_negative=_always),
    Activation("clip", 2, "Clip", lambda y, alpha, beta: np.minimum(np.maximum(y, alpha), beta),
               params=_clip_params, op_attrs=lambda alpha, beta: ClipAttrs(alpha, beta),
               non_negative=lambda alpha, beta: alpha >= 0),
    Activation("leaky_relu", 3, "LeakyRelu", lambda y, alpha, beta: np.where(y >= 0, y, y * alpha),
               params=lambda attrs: (float(attrs.alpha), 0.0), op_attrs=lambda alpha, beta: AlphaAttrs(alpha)),
    Activation("sigmoid", 4, "Sigmoid", lambda y, alpha, beta: _sigmoid(y), non_negative=_always),
    Activation("tanh", 5, "Tanh", lambda y, alpha, beta: np.tanh(y)),
    Activation("hard_sigmoid", 6, "HardSigmoid", lambda y, alpha, beta: np.clip(y * alpha + beta, 0, 1),
               params=lambda attrs: (float(attrs.alpha), float(attrs.beta)),
               op_attrs=lambda alpha, beta: AlphaBetaAttrs(alpha, beta), non_negative=_always),
    # The erf form only (approximate="none", BERT's); the tanh form stays a separate op.
    Activation("gelu", 7, "Gelu", lambda y, alpha, beta: gelu_reference(y, "none").astype(y.dtype),
               params=lambda attrs: (0.0, 0.0) if attrs.approximate == "none" else None,
               op_attrs=lambda alpha, beta: GeluAttrs("none")),
    Activation("hard_swish", 8, "HardSwish", lambda y, alpha, beta: alpha * hard_swish_reference(y) + beta,
               params=lambda attrs: (1.0, 0.0), affine=True),
    Activation("silu", 9, "Silu", lambda y, alpha, beta: y * _sigmoid(y)),
)
ACTIVATION_BY_NAME: dict[str, Activation] = {a.name: a for a in ACTIVATION_TABLE}
ACTIVATION_BY_OP: dict[str, Activation] = {a.op: a for a in ACTIVATION_TABLE if a.op is not None}
ACTIVATIONS = tuple(ACTIVATION_BY_NAME)
# The graph ops an epilogue can absorb.
ACTIVATION_OPS = tuple(ACTIVATION_BY_OP)


def get_activation(name: str) -> Activation:
    try:
        return ACTIVATION_BY_NAME[name]
    except KeyError:
        raise OpError(f"fused activation '{name}' is not one of {', '.join(ACTIVATIONS)}") from None


def epilogue_of(op: str, attrs: Any) -> Epilogue | None:
    """The fused-activation form (name, alpha, beta) of a node of graph op `op`, or None
    when it does not fuse (an op outside the table, a Clip without a lower bound...).
    Clip(min=0) with no upper bound is relu."""
    if op == "Clip" and attrs.max is None and attrs.min is not None and attrs.min == 0:
        return "relu", 0.0, 0.0
    activation = ACTIVATION_BY_OP.get(op)
    params = activation.params(attrs) if activation is not None else None
    if activation is None or params is None:
        return None
    return activation.name, params[0], params[1]


def apply_activation(y: np.ndarray, activation: str, alpha: float, beta: float) -> np.ndarray:
    return get_activation(activation).reference(y, alpha, beta)


def _check_activation(activation: str) -> None:
    get_activation(activation)


@dataclass(frozen=True)
class FusedConvAttrs:
    """The Conv's attributes, the epilogue's activation, and (2-D convolutions only) whether x,
    and y with the residual, are NHWC instead of NCHW (ops/layouts.py; the weights stay
    [M, C/group, kh, kw])."""

    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]
    group: int = 1
    activation: str = "none"
    alpha: float = 0.0
    beta: float = 0.0
    x_channels_last: bool = False
    y_channels_last: bool = False

    @property
    def conv(self) -> ConvAttrs:
        return ConvAttrs(self.strides, self.pads, self.dilations, self.group)


def _fused_conv_infer(attrs: FusedConvAttrs, types):
    x, w, b, residual = types
    _check_activation(attrs.activation)
    if channels_last(attrs):
        return infer_channels_last("FusedConv", _fused_conv_infer, attrs, types)
    (y,) = _conv_infer(attrs.conv, [x, w, b])
    if residual is not None and residual != y:
        raise OpError(f"FusedConv residual {residual} must match the result {y}")
    return (y,)


def _fused_conv(attrs: FusedConvAttrs, arrays):
    x, w, b, residual = arrays
    if channels_last(attrs):
        return reference_channels_last("FusedConv", _fused_conv, attrs, arrays)
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
