"""Composite activations the graph optimizer recognizes from their elementwise expansions:
Gelu (erf or tanh form), HardSwish and Silu (x * sigmoid(x)).

They are unary, elementwise and not primitives: a backend that has no kernel for them gets
them lowered back into elementwise ops (see lowering/activations.py). The references compute
in float64 and round once, so they are at least as accurate as the expansions they replace."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ember.ops.elementwise import ELEMENTWISE, _sigmoid
from ember.ops.math_util import erf
from ember.ops.registry import NoAttrs, OpDef, OpError, define_op
from ember.ops.shape_util import require_float

GELU_APPROXIMATIONS = ("none", "tanh")
# The constants of the tanh approximation (Hendrycks & Gimpel), shared with the lowering and
# the pattern that recognizes it.
GELU_TANH_SCALE = math.sqrt(2.0 / math.pi)
GELU_TANH_CUBIC = 0.044715
# HardSwish(x) = x * HardSigmoid(x) with these parameters (ONNX HardSwish, PyTorch hardswish).
HARD_SWISH_ALPHA = 1.0 / 6.0
HARD_SWISH_BETA = 0.5


@dataclass(frozen=True)
class GeluAttrs:
    """approximate: 'none' for x * Phi(x) with the exact erf, 'tanh' for the tanh formula."""

    approximate: str = "none"


def _float_unary(name: str):
    def infer(attrs, types):
        (t,) = types
        require_float(t, name)
        if isinstance(attrs, GeluAttrs) and attrs.approximate not in GELU_APPROXIMATIONS:
            raise OpError(f"Gelu approximate='{attrs.approximate}' is not one of "
                          f"{', '.join(GELU_APPROXIMATIONS)}")
        return (t,)

    return infer


def gelu_reference(x: np.ndarray, approximate: str) -> np.ndarray:
    xf = x.astype(np.float64)
    if approximate == "tanh":
        inner = GELU_TANH_SCALE * (xf + GELU_TANH_CUBIC * xf ** 3)
        return 0.5 * xf * (1.0 + np.tanh(inner))
    return 0.5 * xf * (1.0 + erf(xf / math.sqrt(2.0)))


def _gelu(attrs: GeluAttrs, arrays):
    (x,) = arrays
    return (gelu_reference(x, attrs.approximate).astype(x.dtype),)


def hard_swish_reference(x: np.ndarray) -> np.ndarray:
    xf = x.astype(np.float64)
    return xf * np.clip(xf * HARD_SWISH_ALPHA + HARD_SWISH_BETA, 0.0, 1.0)


def _hard_swish(attrs, arrays):
    (x,) = arrays
    return (hard_swish_reference(x).astype(x.dtype),)


def _silu(attrs, arrays):
    (x,) = arrays
    return ((x.astype(np.float64) * _sigmoid(x)).astype(x.dtype),)


define_op(OpDef("Gelu", ("x",), ("y",), _float_unary("Gelu"), _gelu, attrs=GeluAttrs, primitive=False,
                traits=ELEMENTWISE))
define_op(OpDef("HardSwish", ("x",), ("y",), _float_unary("HardSwish"), _hard_swish, attrs=NoAttrs,
                primitive=False, traits=ELEMENTWISE))
define_op(OpDef("Silu", ("x",), ("y",), _float_unary("Silu"), _silu, attrs=NoAttrs, primitive=False,
                traits=ELEMENTWISE))
