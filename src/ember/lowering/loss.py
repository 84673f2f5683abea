"""Lowering of the loss ops (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss) onto
primitives: LogSoftmax over the class axis (SoftmaxCrossEntropyLoss only), GatherElements to
pick each element's log-probability of its target class, Gather for the class weights, Equal
and Where for ignore_index, and ReduceSum for the reductions.

The mean divides by the sum of the applied weights (ignored elements weigh 0), as ONNX does.
A target outside [0, C) that is not ignore_index is an error in the reference; the lowering
maps negative targets past the class count so the gathers (which would otherwise count them
from the end) fail at run time with a clean out-of-range error instead."""
from __future__ import annotations

import numpy as np

from ember.graph import Graph, Node, Value
from ember.lowering.engine import lowering, scalar
from ember.ops.loss import LossAttrs
from ember.ops.normalization import SoftmaxAttrs
from ember.ops.reduce import ReduceAttrs
from ember.ops.tensor import AxisAttrs, ReshapeAttrs
from ember.types import DType


def _int(graph: Graph, value: int, dtype: DType, name: str) -> Value:
    return graph.add_constant(np.asarray(value, dtype=dtype.numpy), name)


def _lower_nll(graph: Graph, node: Node, log_prob: Value, target: Value, weight: Value | None) -> Value:
    attrs: LossAttrs = node.attrs
    name = node.name
    dtype = log_prob.type.dtype
    classes = log_prob.type.shape[1]
    shape = target.type.shape  # [N, d...]
    index = target
    # Negative targets (other than ignore_index, replaced below) become C: out of range for
    # both gathers, which then fail cleanly rather than wrap around.
    negative = graph.add("Less", index, _int(graph, 0, target.type.dtype, f"{name}.zero"), name=f"{name}.negative")
    index = graph.add("Where", negative, _int(graph, classes, target.type.dtype, f"{name}.classes"), index,
                      name=f"{name}.checked")
    ignored: Value | None = None
    if attrs.ignore_index is not None:
        ignored = graph.add("Equal", target, _int(graph, attrs.ignore_index, target.type.dtype, f"{name}.ii"),
                            name=f"{name}.ignored")
        index = graph.add("Where", ignored, _int(graph, 0, target.type.dtype, f"{name}.zero"), index,
                          name=f"{name}.index")
    column = graph.add("Reshape", index, attrs=ReshapeAttrs((shape[0], 1) + shape[1:]), name=f"{name}.column")
    picked = graph.add("GatherElements", log_prob, column, attrs=AxisAttrs(1), name=f"{name}.picked")
    picked = graph.add("Reshape", picked, attrs=ReshapeAttrs(shape), name=f"{name}.picked")
    applied: Value | None = None  # the weight of each element; None: all weigh 1
    if weight is not None:
        applied = graph.add("Gather", weight, index, attrs=AxisAttrs(0), name=f"{name}.weights")
    if ignored is not None:
        kept = scalar(graph, 1.0, dtype, f"{name}.one") if applied is None else applied
        applied = graph.add("Where", ignored, scalar(graph, 0.0, dtype, f"{name}.zero"), kept,
                            name=f"{name}.applied")
    loss = graph.add("Neg", picked, name=f"{name}.neg")
    if applied is not None:
        loss = graph.add("Mul", loss, applied, name=f"{name}.weighted")
    if ignored is not None:  # 0, not 0 times what the ignored element's input holds (NaN, inf)
        loss = graph.add("Where", ignored, scalar(graph, 0.0, dtype, f"{name}.zero"), loss, name=f"{name}.kept")
    if attrs.reduction == "none":
        return loss
    every_axis = ReduceAttrs(tuple(range(len(shape))), False)
    total = graph.add("ReduceSum", loss, attrs=every_axis, name=f"{name}.sum")
    if attrs.reduction == "sum":
        return total
    if applied is None:
        count = scalar(graph, float(np.prod(shape)), dtype, f"{name}.count")
    else:
        count = graph.add("ReduceSum", applied, attrs=every_axis, name=f"{name}.weight_sum")
    return graph.add("Div", total, count, name=f"{name}.mean")


@lowering("NegativeLogLikelihoodLoss")
def lower_nll_loss(graph: Graph, node: Node) -> list[Value]:
    log_prob, target, weight = node.inputs
    assert log_prob is not None and target is not None
    return [_lower_nll(graph, node, log_prob, target, weight)]


@lowering("SoftmaxCrossEntropyLoss")
def lower_softmax_cross_entropy(graph: Graph, node: Node) -> list[Value]:
    scores, target, weight = node.inputs
    assert scores is not None and target is not None
    log_prob = graph.add("LogSoftmax", scores, attrs=SoftmaxAttrs(1), name=f"{node.name}.log_prob")
    return [_lower_nll(graph, node, log_prob, target, weight), log_prob]
