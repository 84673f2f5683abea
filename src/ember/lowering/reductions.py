"""Lowerings of the derived reductions (mean, norms, log-sums) to ReduceSum/ReduceMax and
elementwise ops."""
from __future__ import annotations

import math

from ember.graph import Graph, Node, Value
from ember.lowering.engine import lowering, scalar
from ember.ops.math import IsInfAttrs
from ember.ops.reduce import ReduceAttrs
from ember.ops.shape_util import normalize_axes
from ember.ops.tensor import ReshapeAttrs


def _reduce(graph: Graph, op: str, x: Value, axes: tuple[int, ...], keepdims: bool, name: str) -> Value:
    return graph.add(op, x, attrs=ReduceAttrs(axes, keepdims), name=name)


@lowering("ReduceMean")
def lower_reduce_mean(graph: Graph, node: Node) -> list[Value]:
    x = node.input(0)
    attrs: ReduceAttrs = node.attrs
    axes = normalize_axes(attrs.axes, x.type.rank)
    count = math.prod(x.type.shape[a] for a in axes)
    total = _reduce(graph, "ReduceSum", x, axes, attrs.keepdims, f"{node.name}.sum")
    return [graph.add("Div", total, scalar(graph, count, x.type.dtype, "count"), name=node.name)]


def _squared(graph: Graph, x: Value, name: str) -> Value:
    return graph.add("Mul", x, x, name=name)


@lowering("ReduceSumSquare")
def lower_sum_square(graph: Graph, node: Node) -> list[Value]:
    x = node.input(0)
    attrs: ReduceAttrs = node.attrs
    return [_reduce(graph, "ReduceSum", _squared(graph, x, f"{node.name}.sq"), attrs.axes, attrs.keepdims,
                    node.name)]


@lowering("ReduceL2")
def lower_l2(graph: Graph, node: Node) -> list[Value]:
    x = node.input(0)
    attrs: ReduceAttrs = node.attrs
    total = _reduce(graph, "ReduceSum", _squared(graph, x, f"{node.name}.sq"), attrs.axes, attrs.keepdims,
                    f"{node.name}.sum")
    return [graph.add("Sqrt", total, name=node.name)]


@lowering("ReduceL1")
def lower_l1(graph: Graph, node: Node) -> list[Value]:
    x = node.input(0)
    attrs: ReduceAttrs = node.attrs
    absolute = graph.add("Abs", x, name=f"{node.name}.abs")
    return [_reduce(graph, "ReduceSum", absolute, attrs.axes, attrs.keepdims, node.name)]


@lowering("ReduceLogSum")
def lower_log_sum(graph: Graph, node: Node) -> list[Value]:
    x = node.input(0)
    attrs: ReduceAttrs = node.attrs
    total = _reduce(graph, "ReduceSum", x, attrs.axes, attrs.keepdims, f"{node.name}.sum")
    return [graph.add("Log", total, name=node.name)]


@lowering("ReduceLogSumExp")
def lower_log_sum_exp(graph: Graph, node: Node) -> list[Value]:
    """log(sum(exp(x - m))) + m with m = max(x): exact and overflow-free. An infinite max
    shifts by 0 instead (inf - inf would make NaN of what is +inf, or -inf for an all -inf
    slice)."""
    x = node.input(0)
    attrs: ReduceAttrs = node.attrs
    dtype = x.type.dtype
    peak = _reduce(graph, "ReduceMax", x, attrs.axes, True, f"{node.name}.max")
    infinite = graph.add("IsInf", peak, attrs=IsInfAttrs(), name=f"{node.name}.max_is_inf")
    peak = graph.add("Where", infinite, scalar(graph, 0.0, dtype, "zero"), peak, name=f"{node.name}.shift")
    shifted = graph.add("Exp", graph.add("Sub", x, peak), name=f"{node.name}.exp")
    total = _reduce(graph, "ReduceSum", shifted, attrs.axes, True, f"{node.name}.sum")
    y = graph.add("Add", graph.add("Log", total), peak, name=node.name)
    if not attrs.keepdims:
        y = graph.add("Reshape", y, attrs=ReshapeAttrs(node.outputs[0].type.shape), name=f"{node.name}.squeeze")
    return [y]
