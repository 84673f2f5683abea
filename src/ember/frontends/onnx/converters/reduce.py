"""Converters for ONNX reductions and normalizations: Reduce{Sum,Mean,Max,Min,Prod,L1,L2,
SumSquare,LogSum,LogSumExp}, ArgMax/ArgMin, Softmax/LogSoftmax (with the 2-D coercion of
opsets before 13) and LayerNormalization."""
from __future__ import annotations

import math

import numpy as np

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.converters.tensor import normalize_axes, normalize_axis
from ember.frontends.onnx.dtypes import ONNX_TO_DTYPE
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops.elementwise import CastAttrs
from ember.ops.normalization import LayerNormAttrs, SoftmaxAttrs
from ember.ops.reduce import ArgReduceAttrs, ReduceAttrs
from ember.types import DType

_REDUCTIONS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
               "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")


def axes_from_input(op_type: str, opset: int) -> bool:
    """Whether a reduction takes its axes as input 1 (else as an attribute): ReduceSum from
    opset 13, the other reductions from opset 18."""
    return opset >= (13 if op_type == "ReduceSum" else 18)


@converter(*_REDUCTIONS)
def reduction(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    if axes_from_input(ctx.op_type, ctx.opset):
        axes = ctx.constant_ints(1, "axes")
    else:
        axes = ctx.attr_ints("axes", None)
    keepdims = ctx.attr_bool("keepdims", True)
    if not axes:
        if ctx.attr_bool("noop_with_empty_axes", False):
            return x
        axes = tuple(range(x.type.rank))
    axes = tuple(sorted(normalize_axes(axes, x.type.rank)))
    attrs = ReduceAttrs(axes, keepdims)
    if any(x.type.shape[a] == 0 for a in axes) and ctx.op_type in _EMPTY_IDENTITY:
        return _empty_reduction(ctx, x, attrs)
    if x.type.dtype is DType.BOOL and ctx.op_type in ("ReduceMax", "ReduceMin"):
        # Any / all (opset 20): the same reduction on 0/1 bytes.
        as_bytes = ctx.emit1("Cast", [x], CastAttrs(DType.UINT8))
        return ctx.result("Cast", [ctx.emit1(ctx.op_type, [as_bytes], attrs)], CastAttrs(DType.BOOL))[0]
    return ctx.result(ctx.op_type, [x], attrs)[0]


# Reductions over an empty axis give their identity (opset 18+): a constant of the output shape.
_EMPTY_IDENTITY = {"ReduceMax": -np.inf, "ReduceMin": np.inf, "ReduceLogSumExp": -np.inf, "ReduceLogSum": -np.inf}


def _empty_reduction(ctx: NodeContext, x: Value, attrs: ReduceAttrs) -> Value:
    dtype = x.type.dtype.numpy
    value = _EMPTY_IDENTITY[ctx.op_type]
    if dtype.kind == "b":
        value = value > 0  # max of nothing is False, min is True
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        value = info.min if value < 0 else info.max
    shape = [1 if i in attrs.axes else d for i, d in enumerate(x.type.shape)] if attrs.keepdims else \
        [d for i, d in enumerate(x.type.shape) if i not in attrs.axes]
    return ctx.constant_result(np.full(shape, value, dtype=dtype))


@converter("ArgMax", "ArgMin")
def arg_reduce(ctx: NodeContext) -> list[Value]:
    x = ctx.require(0)
    attrs = ArgReduceAttrs(axis=normalize_axis(ctx.attr_int("axis", 0), x.type.rank),
                           keepdims=ctx.attr_bool("keepdims", True),
                           select_last_index=ctx.attr_bool("select_last_index", False))
    return ctx.result(ctx.op_type, [x], attrs)


@converter("Softmax", "LogSoftmax")
def softmax(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    rank = x.type.rank
    if ctx.opset >= 13:
        axis = normalize_axis(ctx.attr_int("axis", -1), rank)
        return ctx.result(ctx.op_type, [x], SoftmaxAttrs(axis))[0]
    # Before opset 13 the input is coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])] and
    # normalized along the second axis, i.e. over all of dims[axis:] together.
    axis = normalize_axis(ctx.attr_int("axis", 1), rank)
    if axis == rank - 1:
        return ctx.result(ctx.op_type, [x], SoftmaxAttrs(axis))[0]
    dims = x.type.shape
    flat = ctx.reshape(x, (math.prod(dims[:axis]), math.prod(dims[axis:])))
    y = ctx.emit1(ctx.op_type, [flat], SoftmaxAttrs(1))
    return ctx.reshape(y, dims, final=True)


@converter("LayerNormalization", min_opset=17)
def layer_norm(ctx: NodeContext) -> list[Value | None]:
    x = ctx.require(0, "X")
    # stash_type only sets the precision of the statistics; Ember's computation is at least
    # as precise as float32, so every value is accepted.
    attrs = LayerNormAttrs(axis=normalize_axis(ctx.attr_int("axis", -1), x.type.rank),
                           epsilon=ctx.attr_float("epsilon", 1e-5))
    (y,) = ctx.result("LayerNormalization", [x, ctx.require(1, "Scale"), ctx.input(2)], attrs)
    if not (ctx.output_used(1) or ctx.output_used(2)):
        return [y, None, None]
    return [y, *_layer_norm_statistics(ctx, x, attrs)]


def _layer_norm_statistics(ctx: NodeContext, x: Value, attrs: LayerNormAttrs) -> list[Value]:
    """The optional Mean and InvStdDev outputs (shape [d0..d(axis-1), 1, ...]) of the type
    stash_type names (float32 by default), computed from x by reductions."""
    stash = ONNX_TO_DTYPE.get(ctx.attr_int("stash_type", 1), DType.FLOAT32)
    xs = x if x.type.dtype is stash else ctx.emit1("Cast", [x], CastAttrs(stash))
    reduce = ReduceAttrs(tuple(range(attrs.axis, x.type.rank)), keepdims=True)
    mean = ctx.emit("ReduceMean", [xs], reduce, [ctx.output_name(1) or f"{ctx.name}_mean"])[0]
    centered = ctx.emit1("Sub", [xs, mean])
    var = ctx.emit1("ReduceMean", [ctx.emit1("Mul", [centered, centered])], reduce)
    eps = ctx.add_constant(np.asarray(attrs.epsilon, stash.numpy), f"{ctx.name}_epsilon")
    std = ctx.emit1("Sqrt", [ctx.emit1("Add", [var, eps])])
    inv = ctx.emit("Reciprocal", [std], None, [ctx.output_name(2) or f"{ctx.name}_inv_std"])[0]
    return [mean, inv]
