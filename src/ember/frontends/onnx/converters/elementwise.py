"""Converters for elementwise ONNX ops: unary math, binary arithmetic, comparisons and logic,
the variadic Max/Min/Sum/Mean, Mod, Where, Clip, Cast/CastLike and the parameterized
activations (LeakyRelu, Elu, HardSigmoid, HardSwish)."""
from __future__ import annotations

import numpy as np

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.dtypes import ONNX_TO_DTYPE, onnx_type_name
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops.elementwise import AlphaAttrs, AlphaBetaAttrs, CastAttrs, ClipAttrs
from ember.support.errors import ModelImportError, UnsupportedError

# ONNX op type -> Ember op of the same semantics.
_UNARY = ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Erf", "Neg", "Abs", "Reciprocal", "Floor",
          "Ceil", "Round", "Sin", "Cos", "Softplus", "Softsign", "Sign", "Not")
_BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
           "And", "Or", "Xor")


@converter(*_UNARY)
def unary(ctx: NodeContext) -> list[Value]:
    return ctx.result(ctx.op_type, [ctx.require(0)])


@converter(*_BINARY)
def binary(ctx: NodeContext) -> list[Value]:
    if ctx.opset < 7 and ctx.attr_bool("broadcast", False):
        # Before opset 7 broadcasting was one-directional and aligned at attribute 'axis'.
        raise UnsupportedError("the legacy 'broadcast' attribute (opsets before 7) is not supported; "
                               "convert the model to opset 7 or later")
    return ctx.result(ctx.op_type, [ctx.require(0), ctx.require(1)])


def _fold_variadic(ctx: NodeContext, op: str) -> Value:
    """Chains a binary op over all inputs, naming the last result after the output."""
    values = [ctx.require(i) for i in range(ctx.num_inputs)]
    if not values:
        raise ModelImportError("needs at least one input")
    acc = values[0]
    for i, value in enumerate(values[1:], start=2):
        if i == len(values) and ctx.op_type != "Mean":
            acc = ctx.result(op, [acc, value])[0]
        else:
            acc = ctx.emit1(op, [acc, value])
    return acc


@converter("Max", "Min", "Sum")
def variadic(ctx: NodeContext) -> Value:
    return _fold_variadic(ctx, {"Max": "Max", "Min": "Min", "Sum": "Add"}[ctx.op_type])


@converter("Mean")
def mean(ctx: NodeContext) -> Value:
    total = _fold_variadic(ctx, "Add")
    count = ctx.add_constant(np.array(ctx.num_inputs, dtype=total.type.dtype.numpy), f"{ctx.name}_count")
    return ctx.result("Div", [total, count])[0]


@converter("Mod")
def mod(ctx: NodeContext) -> Value:
    a, b = ctx.require(0), ctx.require(1)
    fmod = ctx.attr_bool("fmod", False)
    if fmod not in (0, 1):
        raise ModelImportError(f"attribute fmod must be 0 or 1, got {fmod}")
    if fmod == 0:
        if a.type.dtype.is_float and ctx.opset < 28:
            raise UnsupportedError("Mod with fmod=0 on floating-point inputs is invalid before opset 28 "
                                   "(use fmod=1)")
        return ctx.result("Mod", [a, b])[0]
    # fmod=1: the remainder takes the sign of the dividend (C fmod). Ember's Mod takes the
    # sign of the divisor; the two differ by b exactly when the remainder is non-zero and the
    # operands' signs differ.
    r = ctx.emit1("Mod", [a, b])
    zero = ctx.add_constant(np.zeros((), a.type.dtype.numpy), f"{ctx.name}_zero")
    signs_differ = ctx.emit1("Xor", [ctx.emit1("Less", [a, zero]), ctx.emit1("Less", [b, zero])])
    nonzero = ctx.emit1("Not", [ctx.emit1("Equal", [r, zero])])
    adjust = ctx.emit1("And", [signs_differ, nonzero])
    adjusted = ctx.emit1("Sub", [r, b])
    if a.type.dtype.is_float:
        # fmod(a, +-inf) is a for a finite a; the floored remainder is then +-inf, and r - b
        # would be inf - inf = NaN.
        inf = ctx.add_constant(np.array(np.inf, a.type.dtype.numpy), f"{ctx.name}_inf")
        finite_a = ctx.emit1("Equal", [ctx.emit1("Sub", [a, a]), zero])  # a - a is NaN for +-inf and NaN
        keep_a = ctx.emit1("And", [ctx.emit1("Equal", [ctx.emit1("Abs", [b]), inf]), finite_a])
        adjusted = ctx.emit1("Where", [keep_a, a, adjusted])
    return ctx.result("Where", [adjust, adjusted, r])[0]


@converter("Where")
def where(ctx: NodeContext) -> list[Value]:
    return ctx.result("Where", [ctx.require(0), ctx.require(1), ctx.require(2)])


def _bound(ctx: NodeContext, i: int, what: str) -> float | None:
    data = ctx.optional_constant(i, what)
    if data is None:
        return None
    if data.size != 1:
        raise ModelImportError(f"input {i} ({what}) must be a scalar, got shape {list(data.shape)}")
    return float(data.reshape(-1)[0])


@converter("Clip")
def clip(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    if ctx.opset < 11:
        low = ctx.attr_float("min", None)
        high = ctx.attr_float("max", None)
    elif any(ctx.input(i) is not None and not ctx.is_constant(i) for i in (1, 2)):
        # Bounds computed at run time: Max/Min with the (scalar) bound tensors.
        y = x
        for i, op in ((1, "Max"), (2, "Min")):
            if ctx.input(i) is not None:
                y = ctx.emit1(op, [y, ctx.input(i)])
        return y
    else:
        low, high = _bound(ctx, 1, "min"), _bound(ctx, 2, "max")
    if low is None and high is None:
        return x
    return ctx.result("Clip", [x], ClipAttrs(low, high))[0]


@converter("Cast")
def cast(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    to = ctx.attr_int("to")
    if to not in ONNX_TO_DTYPE:
        raise UnsupportedError(f"Cast to {onnx_type_name(to)} is not supported")
    return _cast(ctx, x, ONNX_TO_DTYPE[to])


def _cast(ctx: NodeContext, x: Value, target) -> Value:
    if target is x.type.dtype:
        return x
    saturate = ctx.attr_bool("saturate", True) if ctx.opset >= 19 else True
    round_mode = ctx.attr_str("round_mode", "up")
    if round_mode != "up":
        raise UnsupportedError(f"round_mode '{round_mode}' is not supported (it only affects float8e8m0)")
    return ctx.result("Cast", [x], CastAttrs(target, saturate))[0]


@converter("CastLike", min_opset=15)
def cast_like(ctx: NodeContext) -> Value:
    x, like = ctx.require(0), ctx.require(1)
    return _cast(ctx, x, like.type.dtype)


@converter("LeakyRelu")
def leaky_relu(ctx: NodeContext) -> list[Value]:
    return ctx.result("LeakyRelu", [ctx.require(0)], AlphaAttrs(ctx.attr_float("alpha", 0.01)))


@converter("Elu")
def elu(ctx: NodeContext) -> list[Value]:
    return ctx.result("Elu", [ctx.require(0)], AlphaAttrs(ctx.attr_float("alpha", 1.0)))


@converter("HardSigmoid")
def hard_sigmoid(ctx: NodeContext) -> list[Value]:
    attrs = AlphaBetaAttrs(ctx.attr_float("alpha", 0.2), ctx.attr_float("beta", 0.5))
    return ctx.result("HardSigmoid", [ctx.require(0)], attrs)


@converter("HardSwish", min_opset=14)
def hard_swish(ctx: NodeContext) -> list[Value]:
    x = ctx.require(0)
    gate = ctx.emit1("HardSigmoid", [x], AlphaBetaAttrs(1.0 / 6.0, 0.5))
    return ctx.result("Mul", [x, gate])
