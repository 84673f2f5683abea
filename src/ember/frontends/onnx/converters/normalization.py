"""Converters for ONNX normalizations and losses: InstanceNormalization, GroupNormalization
(per-group scale/bias of opset 18 expanded to per-channel), LRN, MeanVarianceNormalization,
LpNormalization, RMSNormalization, Hardmax (with the 2-D coercion of opsets before 13),
NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss."""
from __future__ import annotations

import math

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.converters.tensor import normalize_axis
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops.loss import LossAttrs
from ember.ops.normalization import (
    AxesAttrs,
    EpsilonAttrs,
    GroupNormAttrs,
    HardmaxAttrs,
    LpNormAttrs,
    LRNAttrs,
    RMSNormAttrs,
)
from ember.ops.tensor import ShapeAttrs


def _check_stash_type(ctx: NodeContext) -> None:
    # stash_type sets the precision of the statistics; Ember's are float64, at least as
    # precise as any requested type, so every value is accepted.
    ctx.attr_int("stash_type", 1)


@converter("InstanceNormalization")
def instance_norm(ctx: NodeContext) -> list[Value]:
    inputs = [ctx.require(0, "input"), ctx.require(1, "scale"), ctx.require(2, "B")]
    return ctx.result("InstanceNormalization", inputs, EpsilonAttrs(ctx.attr_float("epsilon", 1e-5)))


def _per_channel(ctx: NodeContext, value: Value, groups: int, channels: int) -> Value:
    """A per-group [G] parameter repeated to per-channel [C] (GroupNormalization-18)."""
    if value.type.shape == (channels,):
        return value
    column = ctx.reshape(value, (groups, 1))
    expanded = ctx.emit1("Expand", [column], ShapeAttrs((groups, channels // groups)))
    return ctx.reshape(expanded, (channels,))


@converter("GroupNormalization", min_opset=18)
def group_norm(ctx: NodeContext) -> list[Value]:
    _check_stash_type(ctx)
    x = ctx.require(0, "X")
    groups = ctx.attr_int("num_groups")
    channels = x.type.shape[1]
    scale = _per_channel(ctx, ctx.require(1, "scale"), groups, channels)
    bias = _per_channel(ctx, ctx.require(2, "bias"), groups, channels)
    attrs = GroupNormAttrs(groups, ctx.attr_float("epsilon", 1e-5))
    return ctx.result("GroupNormalization", [x, scale, bias], attrs)


@converter("LRN")
def lrn(ctx: NodeContext) -> list[Value]:
    attrs = LRNAttrs(ctx.attr_int("size"), ctx.attr_float("alpha", 1e-4), ctx.attr_float("beta", 0.75),
                     ctx.attr_float("bias", 1.0))
    return ctx.result("LRN", [ctx.require(0)], attrs)


@converter("MeanVarianceNormalization")
def mvn(ctx: NodeContext) -> list[Value]:
    return ctx.result("MeanVarianceNormalization", [ctx.require(0)], AxesAttrs(ctx.attr_ints("axes", (0, 2, 3))))


@converter("LpNormalization")
def lp_norm(ctx: NodeContext) -> list[Value]:
    x = ctx.require(0)
    attrs = LpNormAttrs(normalize_axis(ctx.attr_int("axis", -1), x.type.rank), ctx.attr_int("p", 2))
    return ctx.result("LpNormalization", [x], attrs)


@converter("RMSNormalization", min_opset=23)
def rms_norm(ctx: NodeContext) -> list[Value]:
    _check_stash_type(ctx)
    x = ctx.require(0, "X")
    attrs = RMSNormAttrs(normalize_axis(ctx.attr_int("axis", -1), x.type.rank), ctx.attr_float("epsilon", 1e-5))
    return ctx.result("RMSNormalization", [x, ctx.require(1, "scale")], attrs)


@converter("Hardmax")
def hardmax(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    rank = x.type.rank
    if ctx.opset >= 13:
        return ctx.result("Hardmax", [x], HardmaxAttrs(normalize_axis(ctx.attr_int("axis", -1), rank)))[0]
    # Before opset 13 the input is coerced to 2-D at `axis` (default 1), as Softmax was.
    axis = normalize_axis(ctx.attr_int("axis", 1), rank)
    dims = x.type.shape
    flat = ctx.reshape(x, (math.prod(dims[:axis]), math.prod(dims[axis:])))
    return ctx.reshape(ctx.emit1("Hardmax", [flat], HardmaxAttrs(1)), dims, final=True)


def _loss_attrs(ctx: NodeContext) -> LossAttrs:
    return LossAttrs(ctx.attr_str("reduction", "mean"), ctx.attr_int("ignore_index", None))


@converter("NegativeLogLikelihoodLoss", min_opset=12)
def nll_loss(ctx: NodeContext) -> list[Value]:
    return ctx.result("NegativeLogLikelihoodLoss", [ctx.require(0), ctx.require(1), ctx.input(2)],
                      _loss_attrs(ctx))


@converter("SoftmaxCrossEntropyLoss", min_opset=12)
def softmax_cross_entropy(ctx: NodeContext) -> list[Value]:
    return ctx.result("SoftmaxCrossEntropyLoss", [ctx.require(0), ctx.require(1), ctx.input(2)],
                      _loss_attrs(ctx))

