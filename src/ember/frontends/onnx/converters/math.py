"""Converters for the elementwise ONNX ops of ops/math.py (trigonometry, NaN/Inf tests,
bitwise ops, BitShift, BitCast, Selu, Celu, ThresholdedRelu, Shrink, PRelu, Mish), for
activations built from existing ops (Gelu of opset 20, Swish, SwiGLU), for Einsum and Det
(ops/linalg.py) and for DFT and STFT (ops/spectral.py)."""
from __future__ import annotations

import numpy as np

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.dtypes import ONNX_TO_DTYPE, onnx_type_name
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops.activations import GELU_APPROXIMATIONS, GeluAttrs
from ember.ops.linalg import EinsumAttrs
from ember.ops.math import BitCastAttrs, BitShiftAttrs, CeluAttrs, IsInfAttrs, SeluAttrs, ShrinkAttrs, ThresholdAttrs
from ember.ops.spectral import DFTAttrs, STFTAttrs
from ember.support.errors import ModelImportError, UnsupportedError

_UNARY = ("Acos", "Asin", "Atan", "Sinh", "Cosh", "Tan", "Asinh", "Acosh", "Atanh", "Mish", "IsNaN",
          "BitwiseNot")
_BINARY = ("BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu")


@converter(*_UNARY)
def unary(ctx: NodeContext) -> list[Value]:
    return ctx.result(ctx.op_type, [ctx.require(0)])


@converter(*_BINARY)
def binary(ctx: NodeContext) -> list[Value]:
    return ctx.result(ctx.op_type, [ctx.require(0), ctx.require(1)])


@converter("IsInf")
def is_inf(ctx: NodeContext) -> list[Value]:
    attrs = IsInfAttrs(ctx.attr_bool("detect_negative", True), ctx.attr_bool("detect_positive", True))
    return ctx.result("IsInf", [ctx.require(0)], attrs)


@converter("BitShift")
def bit_shift(ctx: NodeContext) -> list[Value]:
    direction = ctx.attr_str("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise ModelImportError(f"direction '{direction}' is not LEFT or RIGHT")
    return ctx.result("BitShift", [ctx.require(0), ctx.require(1)], BitShiftAttrs(direction))


@converter("Selu")
def selu(ctx: NodeContext) -> list[Value]:
    defaults = SeluAttrs()
    attrs = SeluAttrs(ctx.attr_float("alpha", defaults.alpha), ctx.attr_float("gamma", defaults.gamma))
    return ctx.result("Selu", [ctx.require(0)], attrs)


@converter("Celu")
def celu(ctx: NodeContext) -> list[Value]:
    return ctx.result("Celu", [ctx.require(0)], CeluAttrs(ctx.attr_float("alpha", 1.0)))


@converter("ThresholdedRelu")
def thresholded_relu(ctx: NodeContext) -> list[Value]:
    return ctx.result("ThresholdedRelu", [ctx.require(0)], ThresholdAttrs(ctx.attr_float("alpha", 1.0)))


@converter("Shrink")
def shrink(ctx: NodeContext) -> list[Value]:
    attrs = ShrinkAttrs(ctx.attr_float("bias", 0.0), ctx.attr_float("lambd", 0.5))
    return ctx.result("Shrink", [ctx.require(0)], attrs)


@converter("Gelu", min_opset=20)
def gelu(ctx: NodeContext) -> list[Value]:
    approximate = ctx.attr_str("approximate", "none")
    if approximate not in GELU_APPROXIMATIONS:
        raise ModelImportError(f"approximate '{approximate}' is not one of {', '.join(GELU_APPROXIMATIONS)}")
    return ctx.result("Gelu", [ctx.require(0)], GeluAttrs(approximate))


@converter("Swish", min_opset=24)
def swish(ctx: NodeContext) -> list[Value]:
    """x * sigmoid(alpha * x); Silu when alpha is 1."""
    x = ctx.require(0)
    alpha = ctx.attr_float("alpha", 1.0)
    if alpha == 1.0:
        return ctx.result("Silu", [x])
    scaled = ctx.emit1("Mul", [x, ctx.add_constant(np.asarray(alpha, x.type.dtype.numpy), f"{ctx.name}_alpha")])
    return ctx.result("Mul", [x, ctx.emit1("Sigmoid", [scaled])])


@converter("SwiGLU", min_opset=28)
def swiglu(ctx: NodeContext) -> list[Value]:
    """Swish_alpha(A) * B."""
    a, b = ctx.require(0, "A"), ctx.require(1, "B")
    if a.type.shape != b.type.shape:
        raise ModelImportError(f"A {a.type} and B {b.type} must have the same shape (SwiGLU does not broadcast)")
    alpha = ctx.attr_float("alpha", 1.0)
    if alpha == 1.0:
        gate = ctx.emit1("Silu", [a])
    else:
        scaled = ctx.emit1("Mul", [a, ctx.add_constant(np.asarray(alpha, a.type.dtype.numpy), f"{ctx.name}_alpha")])
        gate = ctx.emit1("Mul", [a, ctx.emit1("Sigmoid", [scaled])])
    return ctx.result("Mul", [gate, b])


@converter("BitCast", min_opset=26)
def bit_cast(ctx: NodeContext) -> list[Value]:
    to = ctx.attr_int("to")
    if to not in ONNX_TO_DTYPE:
        raise UnsupportedError(f"BitCast to {onnx_type_name(to)} is not supported")
    return ctx.result("BitCast", [ctx.require(0)], BitCastAttrs(ONNX_TO_DTYPE[to]))


@converter("Einsum")
def einsum(ctx: NodeContext) -> list[Value]:
    inputs = [ctx.require(i) for i in range(ctx.num_inputs)]
    return ctx.result("Einsum", inputs, EinsumAttrs(ctx.attr_str("equation")))


@converter("Det")
def det(ctx: NodeContext) -> list[Value]:
    return ctx.result("Det", [ctx.require(0)])


@converter("DFT", min_opset=17)
def dft(ctx: NodeContext) -> list[Value]:
    x = ctx.require(0)
    rank = x.type.rank
    if ctx.opset >= 20:
        axis_values = ctx.constant_ints(2, "axis")
        axis = -2 if axis_values is None else axis_values[0]
    else:
        axis = ctx.attr_int("axis", 1)
    if not -rank <= axis < rank - 1 or (axis < 0 and axis + rank >= rank - 1):
        raise ModelImportError(f"axis {axis} is not a signal axis of {x.type} (the last axis holds real/imaginary)")
    axis %= rank
    inverse, onesided = ctx.attr_bool("inverse", False), ctx.attr_bool("onesided", False)
    lengths = ctx.constant_ints(1, "dft_length") if ctx.input(1) is not None else None
    if lengths:
        length = lengths[0]
    else:
        length = 2 * (x.type.shape[axis] - 1) if inverse and onesided else x.type.shape[axis]
    return ctx.result("DFT", [x], DFTAttrs(axis, length, inverse, onesided))


@converter("STFT", min_opset=17)
def stft(ctx: NodeContext) -> list[Value]:
    signal, window = ctx.require(0, "signal"), ctx.input(2)
    if window is not None and window.type.rank != 1:
        raise ModelImportError(f"window {window.type} must be 1-D (one weight per sample of a frame)")
    step = ctx.constant_ints(1, "frame_step")
    if not step:
        raise ModelImportError("frame_step is required")
    lengths = ctx.constant_ints(3, "frame_length") if ctx.input(3) is not None else None
    if lengths:
        length = lengths[0]
    elif window is not None:
        length = window.type.shape[0]
    else:
        raise ModelImportError("one of window and frame_length is required")
    attrs = STFTAttrs(step[0], length, ctx.attr_bool("onesided", True))
    return ctx.result("STFT", [signal, window], attrs)
