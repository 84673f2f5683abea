"""Lowerings of Softmax, LogSoftmax and LayerNormalization into reductions and elementwise
ops (max-subtracted, so exp never overflows)."""
from __future__ import annotations

from ember.graph import Graph, Node, Value
from ember.lowering.engine import lowering, scalar
from ember.ops.normalization import LayerNormAttrs, SoftmaxAttrs
from ember.ops.reduce import ReduceAttrs
from ember.ops.shape_util import normalize_axis


def _shifted(graph: Graph, node: Node) -> tuple[Value, ReduceAttrs]:
    x = node.input(0)
    attrs: SoftmaxAttrs = node.attrs
    reduce_attrs = ReduceAttrs((normalize_axis(attrs.axis, x.type.rank),), True)
    peak = graph.add("ReduceMax", x, attrs=reduce_attrs, name=f"{node.name}.max")
    return graph.add("Sub", x, peak, name=f"{node.name}.shift"), reduce_attrs


@lowering("Softmax")
def lower_softmax(graph: Graph, node: Node) -> list[Value]:
    shifted, reduce_attrs = _shifted(graph, node)
    e = graph.add("Exp", shifted, name=f"{node.name}.exp")
    total = graph.add("ReduceSum", e, attrs=reduce_attrs, name=f"{node.name}.sum")
    return [graph.add("Div", e, total, name=node.name)]


@lowering("LogSoftmax")
def lower_log_softmax(graph: Graph, node: Node) -> list[Value]:
    shifted, reduce_attrs = _shifted(graph, node)
    e = graph.add("Exp", shifted, name=f"{node.name}.exp")
    total = graph.add("ReduceSum", e, attrs=reduce_attrs, name=f"{node.name}.sum")
    return [graph.add("Sub", shifted, graph.add("Log", total), name=node.name)]


@lowering("LayerNormalization")
def lower_layer_norm(graph: Graph, node: Node) -> list[Value]:
    """(x - mean) / sqrt(var + eps) * scale + bias over axes [axis, rank)."""
    x, scale, bias = node.input(0), node.inputs[1], node.inputs[2]
    attrs: LayerNormAttrs = node.attrs
    axes = tuple(range(normalize_axis(attrs.axis, x.type.rank), x.type.rank))
    reduce_attrs = ReduceAttrs(axes, True)
    mean = graph.add("ReduceMean", x, attrs=reduce_attrs, name=f"{node.name}.mean")
    centered = graph.add("Sub", x, mean, name=f"{node.name}.center")
    var = graph.add("ReduceMean", graph.add("Mul", centered, centered), attrs=reduce_attrs,
                    name=f"{node.name}.var")
    eps = scalar(graph, attrs.epsilon, x.type.dtype, "epsilon")
    std = graph.add("Sqrt", graph.add("Add", var, eps), name=f"{node.name}.std")
    y = graph.add("Mul", graph.add("Div", centered, std), scale, name=f"{node.name}.scale")
    if bias is not None:
        y = graph.add("Add", y, bias, name=f"{node.name}.bias")
    return [y]
