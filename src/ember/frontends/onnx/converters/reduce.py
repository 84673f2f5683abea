"""Converters for ONNX reductions and normalizations: Reduce{Sum,Mean,Max,Min,Prod,L1,L2,
SumSquare,LogSum,LogSumExp}, ArgMax/ArgMin, Softmax/LogSoftmax (with the 2-D coercion of
opsets before 13) and LayerNormalization."""
from __future__ import annotations

import math

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.converters.tensor import normalize_axes, normalize_axis
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops.reduce import ArgReduceAttrs, LayerNormAttrs, ReduceAttrs, SoftmaxAttrs

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
    keepdims = bool(ctx.attr_int("keepdims", 1))
    if not axes:
        if ctx.attr_int("noop_with_empty_axes", 0):
            return x
        axes = tuple(range(x.type.rank))
    axes = tuple(sorted(normalize_axes(axes, x.type.rank)))
    return ctx.result(ctx.op_type, [x], ReduceAttrs(axes, keepdims))[0]


@converter("ArgMax", "ArgMin")
def arg_reduce(ctx: NodeContext) -> list[Value]:
    x = ctx.require(0)
    attrs = ArgReduceAttrs(axis=normalize_axis(ctx.attr_int("axis", 0), x.type.rank),
                           keepdims=bool(ctx.attr_int("keepdims", 1)),
                           select_last_index=bool(ctx.attr_int("select_last_index", 0)))
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
def layer_norm(ctx: NodeContext) -> list[Value]:
    ctx.check_unused(1, "the Mean output")
    ctx.check_unused(2, "the InvStdDev output")
    x = ctx.require(0, "X")
    # stash_type only sets the precision of the statistics; Ember's computation is at least
    # as precise as float32, so every value is accepted.
    attrs = LayerNormAttrs(axis=normalize_axis(ctx.attr_int("axis", -1), x.type.rank),
                           epsilon=ctx.attr_float("epsilon", 1e-5))
    return ctx.result("LayerNormalization", [x, ctx.require(1, "Scale"), ctx.input(2)], attrs)
