"""Converters for ONNX's explicit quantization ops: QuantizeLinear, DequantizeLinear
(per tensor, per axis, blocked; output_dtype from opset 21/23), DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv."""
from __future__ import annotations

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.converters.nn import window_attrs
from ember.frontends.onnx.dtypes import ONNX_TO_DTYPE, onnx_type_name
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Constant, Value
from ember.ops.nn import ConvAttrs
from ember.ops.quant import QuantizeAttrs
from ember.ops.registry import OpError
from ember.support.errors import ModelImportError, UnsupportedError
from ember.types import DType


def _dtype_attr(ctx: NodeContext, name: str):
    code = ctx.attr_int(name, 0)
    if not code:
        return None
    if code not in ONNX_TO_DTYPE:
        raise UnsupportedError(f"{name} {onnx_type_name(code)} is not supported")
    return ONNX_TO_DTYPE[code]


def _check_precision(ctx: NodeContext) -> None:
    precision = _dtype_attr(ctx, "precision")
    if precision is not None and precision not in (DType.FLOAT32, DType.FLOAT64):
        raise UnsupportedError(f"precision {precision} is not supported (Ember divides in the input's type)")


@converter("QuantizeLinear", min_opset=10)
def quantize_linear(ctx: NodeContext) -> list[Value]:
    x, scale, zero = ctx.require(0, "x"), ctx.require(1, "y_scale"), ctx.input(2)
    _check_precision(ctx)
    declared = _dtype_attr(ctx, "output_dtype")
    if zero is not None and declared is not None and declared is not zero.type.dtype:
        raise ModelImportError(f"output_dtype {declared} differs from the zero point's type {zero.type.dtype}")
    to = zero.type.dtype if zero is not None else (declared or DType.UINT8)
    attrs = QuantizeAttrs(to, ctx.attr_int("axis", 1), ctx.attr_int("block_size", 0),
                          ctx.attr_bool("saturate", True))
    return ctx.result("QuantizeLinear", [x, scale, zero], attrs)


@converter("DequantizeLinear", min_opset=10)
def dequantize_linear(ctx: NodeContext) -> list[Value]:
    x, scale, zero = ctx.require(0, "x"), ctx.require(1, "x_scale"), ctx.input(2)
    to = _dtype_attr(ctx, "output_dtype") or scale.type.dtype
    attrs = QuantizeAttrs(to, ctx.attr_int("axis", 1), ctx.attr_int("block_size", 0))
    if isinstance(x, Constant) and x.type.dtype in (DType.INT8, DType.UINT8, DType.INT32) and not attrs.block_size:
        # Quantized weights and biases stay quantized: the fold-qdq pass needs them to form
        # integer ops (constant-fold dequantizes whatever it leaves).
        try:
            return ctx.graph.add_node("DequantizeLinear", [x, scale, zero], attrs, name=ctx.name,
                                      result_names=[ctx.output_name(0) or f"{ctx.name}_out0"])
        except OpError as err:
            raise ModelImportError(f"DequantizeLinear: {err}") from None
    return ctx.result("DequantizeLinear", [x, scale, zero], attrs)


@converter("DynamicQuantizeLinear", min_opset=11)
def dynamic_quantize_linear(ctx: NodeContext) -> list[Value]:
    return ctx.result("DynamicQuantizeLinear", [ctx.require(0)])


@converter("MatMulInteger", min_opset=10)
def matmul_integer(ctx: NodeContext) -> list[Value]:
    return ctx.result("MatMulInteger", [ctx.require(0), ctx.require(1), ctx.input(2), ctx.input(3)])


@converter("QLinearMatMul", min_opset=10)
def qlinear_matmul(ctx: NodeContext) -> list[Value]:
    return ctx.result("QLinearMatMul", [ctx.require(i) for i in range(8)])


def _conv_attrs(ctx: NodeContext, x: Value, w: Value) -> ConvAttrs:
    if x.type.rank < 3 or w.type.rank != x.type.rank:
        raise ModelImportError(f"input {x.type} and weight {w.type} must have equal rank >= 3")
    strides, pads, dilations = window_attrs(ctx, x.type.shape[2:], w.type.shape[2:])
    return ConvAttrs(strides, pads, dilations, ctx.attr_int("group", 1))


@converter("ConvInteger", min_opset=10)
def conv_integer(ctx: NodeContext) -> list[Value]:
    x, w = ctx.require(0, "x"), ctx.require(1, "w")
    return ctx.result("ConvInteger", [x, w, ctx.input(2), ctx.input(3)], _conv_attrs(ctx, x, w))


@converter("QLinearConv", min_opset=10)
def qlinear_conv(ctx: NodeContext) -> list[Value]:
    required = [ctx.require(i) for i in range(8)]
    return ctx.result("QLinearConv", [*required, ctx.input(8)], _conv_attrs(ctx, required[0], required[3]))
