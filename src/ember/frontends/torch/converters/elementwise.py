"""Elementwise ATen ops: unary math, binary arithmetic and comparisons with torch's type
promotion made explicit (operands are cast to the type the op computes in), logic, where,
clamps and the activations, casts and copies."""
from __future__ import annotations

import torch

from ember.frontends.torch.context import AtenContext
from ember.frontends.torch.dtypes import to_dtype
from ember.frontends.torch.registry import aten
from ember.graph.ir import Value
from ember.ops.activations import GeluAttrs
from ember.ops.elementwise import AlphaAttrs, AlphaBetaAttrs, ClipAttrs
from ember.ops.math import IsInfAttrs
from ember.support.errors import UnsupportedOpError
from ember.types import DType

_UNARY = {
    "abs": "Abs", "neg": "Neg", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "reciprocal": "Reciprocal",
    "sin": "Sin", "cos": "Cos", "tan": "Tan", "asin": "Asin", "acos": "Acos", "atan": "Atan", "sinh": "Sinh",
    "cosh": "Cosh", "asinh": "Asinh", "acosh": "Acosh", "atanh": "Atanh", "tanh": "Tanh", "sigmoid": "Sigmoid",
    "relu": "Relu", "erf": "Erf", "floor": "Floor", "ceil": "Ceil", "round": "Round", "sign": "Sign",
    "hardswish": "HardSwish", "silu": "Silu", "mish": "Mish",
}


def _unary(op: str):
    def convert(ctx: AtenContext) -> Value:
        return ctx.emit1(op, [ctx.tensor("self", ctx.out_dtype())])

    return convert


for _name, _op in _UNARY.items():
    aten(f"{_name}.default")(_unary(_op))


@aten("rsqrt.default")
def _rsqrt(ctx: AtenContext) -> Value:
    return ctx.emit1("Reciprocal", [ctx.emit1("Sqrt", [ctx.tensor("self", ctx.out_dtype())])])


@aten("expm1.default")
def _expm1(ctx: AtenContext) -> Value:
    x = ctx.tensor("self", ctx.out_dtype())
    return ctx.emit1("Sub", [ctx.emit1("Exp", [x]), ctx.value_of(1)])


@aten("log1p.default")
def _log1p(ctx: AtenContext) -> Value:
    x = ctx.tensor("self", ctx.out_dtype())
    return ctx.emit1("Log", [ctx.emit1("Add", [x, ctx.value_of(1)])])


@aten("trunc.default")
def _trunc(ctx: AtenContext) -> Value:
    x = ctx.tensor("self")
    return trunc(ctx, x) if x.type.dtype.is_float else x


def trunc(ctx: AtenContext, x: Value) -> Value:
    return ctx.emit1("Mul", [ctx.emit1("Sign", [x]), ctx.emit1("Floor", [ctx.emit1("Abs", [x])])])


def compute_dtype(ctx: AtenContext, *names: str) -> DType:
    """The type torch computes a binary op in: its type promotion of the operands."""
    metas = [ctx.meta_of(n) for n in names]
    if len(metas) == 1:
        return to_dtype(metas[0].dtype, ctx.op)
    return to_dtype(torch.result_type(metas[0], metas[1]), ctx.op)


def _scaled(ctx: AtenContext, name: str, dtype: DType, factor_name: str) -> Value:
    value = ctx.tensor(name, dtype)
    factor = ctx.args.get(factor_name, 1)
    if factor == 1:
        return value
    return ctx.emit1("Mul", [value, ctx.value_of(factor, dtype)])


def _arith(op: str, alpha: bool = False):
    def convert(ctx: AtenContext) -> Value:
        dtype = ctx.out_dtype()
        a = ctx.tensor("self", dtype)
        b = _scaled(ctx, "other", dtype, "alpha") if alpha else ctx.tensor("other", dtype)
        if dtype is DType.BOOL and op in ("Add", "Mul"):
            return ctx.emit1("Or" if op == "Add" else "And", [a, b])
        return ctx.emit1(op, [a, b])

    return convert


for _name, _op, _alpha in (("add", "Add", True), ("sub", "Sub", True), ("mul", "Mul", False),
                           ("div", "Div", False), ("maximum", "Max", False), ("minimum", "Min", False),
                           ("remainder", "Mod", False)):
    _overloads = {"maximum": ("default",), "minimum": ("default",), "remainder": ("Tensor", "Scalar"),
                  "mul": ("Tensor", "Scalar")}  # mul.Scalar: the decomposed scaled_dot_product_attention
    aten(*(f"{_name}.{o}" for o in _overloads.get(_name, ("Tensor",))))(_arith(_op, _alpha))


@aten("div.Tensor_mode")
def _div_mode(ctx: AtenContext) -> Value:
    mode = ctx["rounding_mode"]
    dtype = ctx.out_dtype()
    a, b = ctx.tensor("self", dtype), ctx.tensor("other", dtype)
    if mode is None:
        return ctx.emit1("Div", [a, b])
    if dtype.is_float:
        quotient = ctx.emit1("Div", [a, b])
        return ctx.emit1("Floor", [quotient]) if mode == "floor" else trunc(ctx, quotient)
    if mode == "trunc":
        return ctx.emit1("Div", [a, b])  # integer Div truncates toward zero
    # Floor division of integers: a - (a mod b) is an exact multiple of b (mod takes b's sign).
    return ctx.emit1("Div", [ctx.emit1("Sub", [a, ctx.emit1("Mod", [a, b])]), b])


@aten("pow.Tensor_Tensor", "pow.Tensor_Scalar", "pow.Scalar")
def _pow(ctx: AtenContext) -> Value:
    dtype = ctx.out_dtype()
    exponent = ctx["exponent"]
    if isinstance(exponent, int | float) and exponent == 2:
        x = ctx.tensor("self", dtype)
        return ctx.emit1("Mul", [x, x])
    if isinstance(exponent, int | float) and exponent == 0.5 and dtype.is_float:
        return ctx.emit1("Sqrt", [ctx.tensor("self", dtype)])
    return ctx.emit1("Pow", [ctx.tensor("self", dtype), ctx.tensor("exponent", dtype)])


_COMPARE = {"eq": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater", "ge": "GreaterOrEqual"}


def _compare(op: str | None):
    def convert(ctx: AtenContext) -> Value:
        dtype = compute_dtype(ctx, "self", "other")
        a, b = ctx.tensor("self", dtype), ctx.tensor("other", dtype)
        if op is None:  # ne
            return ctx.emit1("Not", [ctx.emit1("Equal", [a, b])])
        return ctx.emit1(op, [a, b])

    return convert


for _name, _op in _COMPARE.items():
    aten(f"{_name}.Tensor", f"{_name}.Scalar")(_compare(_op))
aten("ne.Tensor", "ne.Scalar")(_compare(None))


def _logic(op: str):
    def convert(ctx: AtenContext) -> Value:
        names = ("self", "other") if "other" in ctx.args else ("self",)
        values = [ctx.tensor(n, DType.BOOL) for n in names]
        return ctx.cast(ctx.emit1(op, values), ctx.out_dtype())

    return convert


for _name, _op in (("logical_and", "And"), ("logical_or", "Or"), ("logical_xor", "Xor"), ("logical_not", "Not")):
    aten(f"{_name}.default")(_logic(_op))


def _bitwise(logic: str, bits: str):
    def convert(ctx: AtenContext) -> Value:
        dtype = ctx.out_dtype()
        names = ("self", "other") if "other" in ctx.args else ("self",)
        values = [ctx.tensor(n, dtype) for n in names]
        return ctx.emit1(logic if dtype is DType.BOOL else bits, values)

    return convert


for _name, _logic_op, _bits_op in (("bitwise_and", "And", "BitwiseAnd"), ("bitwise_or", "Or", "BitwiseOr"),
                                   ("bitwise_xor", "Xor", "BitwiseXor")):
    aten(f"{_name}.Tensor")(_bitwise(_logic_op, _bits_op))
aten("bitwise_not.default")(_bitwise("Not", "BitwiseNot"))


@aten("isnan.default")
def _isnan(ctx: AtenContext) -> Value:
    return ctx.emit1("IsNaN", [ctx.tensor("self")])


@aten("isinf.default")
def _isinf(ctx: AtenContext) -> Value:
    return ctx.emit1("IsInf", [ctx.tensor("self")], IsInfAttrs())


@aten("where.self")
def _where(ctx: AtenContext) -> Value:
    dtype = ctx.out_dtype()
    return ctx.emit1("Where", [ctx.tensor("condition", DType.BOOL), ctx.tensor("self", dtype),
                               ctx.tensor("other", dtype)])


@aten("clamp.default")
def _clamp(ctx: AtenContext) -> Value:
    x = ctx.tensor("self", ctx.out_dtype())
    return ctx.emit1("Clip", [x], ClipAttrs(ctx.number("min"), ctx.number("max")))


@aten("clamp.Tensor")
def _clamp_tensor(ctx: AtenContext) -> Value:
    dtype = ctx.out_dtype()
    x = ctx.tensor("self", dtype)
    if ctx["min"] is not None:
        x = ctx.emit1("Max", [x, ctx.tensor("min", dtype)])
    if ctx["max"] is not None:
        x = ctx.emit1("Min", [x, ctx.tensor("max", dtype)])
    return x


@aten("hardtanh.default")
def _hardtanh(ctx: AtenContext) -> Value:
    return ctx.emit1("Clip", [ctx.tensor("self")], ClipAttrs(ctx.number("min_val"), ctx.number("max_val")))


@aten("leaky_relu.default")
def _leaky_relu(ctx: AtenContext) -> Value:
    return ctx.emit1("LeakyRelu", [ctx.tensor("self")], AlphaAttrs(float(ctx.number("negative_slope", 0.01) or 0)))


@aten("elu.default")
def _elu(ctx: AtenContext) -> Value:
    if ctx.number("scale") != 1 or ctx.number("input_scale") != 1:
        raise UnsupportedOpError("elu with scale or input_scale other than 1 (selu/celu forms) is not supported")
    return ctx.emit1("Elu", [ctx.tensor("self")], AlphaAttrs(float(ctx.number("alpha", 1.0) or 0)))


@aten("hardsigmoid.default")
def _hardsigmoid(ctx: AtenContext) -> Value:
    return ctx.emit1("HardSigmoid", [ctx.tensor("self")], AlphaBetaAttrs(1 / 6, 0.5))


@aten("gelu.default")
def _gelu(ctx: AtenContext) -> Value:
    return ctx.emit1("Gelu", [ctx.tensor("self")], GeluAttrs(str(ctx["approximate"])))


@aten("softplus.default")
def _softplus(ctx: AtenContext) -> Value:
    beta = ctx.number("beta", 1.0)
    x = ctx.tensor("self")
    if beta == 1:
        return ctx.emit1("Softplus", [x])
    scaled = ctx.emit1("Mul", [x, ctx.value_of(beta)])
    return ctx.emit1("Div", [ctx.emit1("Softplus", [scaled]), ctx.value_of(beta)])


@aten("_to_copy.default", "clone.default", "alias.default", "lift_fresh_copy.default")
def _copy(ctx: AtenContext) -> Value:
    device = ctx.args.get("device")
    if device is not None and torch.device(device).type != "cpu":
        raise UnsupportedOpError(f"a copy to device {device}: Ember runs on the CPU")
    return ctx.tensor("self", ctx.out_dtype())
