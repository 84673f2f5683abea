"""Lowerings of Gemm and BatchNormalization."""
from __future__ import annotations

from ember.graph import Graph, Node, Value
from ember.lowering.engine import lowering, scalar
from ember.ops.nn import BatchNormAttrs, GemmAttrs
from ember.ops.tensor import ReshapeAttrs, TransposeAttrs


@lowering("Gemm")
def lower_gemm(graph: Graph, node: Node) -> list[Value]:
    """alpha * op(A) @ op(B) + beta * C  ->  MatMul (+ Transpose, Mul, Add)."""
    attrs: GemmAttrs = node.attrs
    a, b, c = node.input(0), node.input(1), node.inputs[2]
    dtype = a.type.dtype
    if attrs.transA:
        a = graph.add("Transpose", a, attrs=TransposeAttrs((1, 0)), name=f"{node.name}.transA")
    if attrs.transB:
        b = graph.add("Transpose", b, attrs=TransposeAttrs((1, 0)), name=f"{node.name}.transB")
    y = graph.add("MatMul", a, b, name=f"{node.name}.matmul")
    if attrs.alpha != 1.0:
        y = graph.add("Mul", y, scalar(graph, attrs.alpha, dtype, "alpha"), name=f"{node.name}.alpha")
    if c is not None and attrs.beta != 0.0:
        if attrs.beta != 1.0:
            c = graph.add("Mul", c, scalar(graph, attrs.beta, dtype, "beta"), name=f"{node.name}.beta")
        y = graph.add("Add", y, c, name=f"{node.name}.bias")
    return [y]


@lowering("BatchNormalization")
def lower_batchnorm(graph: Graph, node: Node) -> list[Value]:
    """y = x * s + t with s = scale / sqrt(var + eps), t = bias - mean * s, both reshaped to
    broadcast over the channel axis. With constant statistics, constant folding turns s and t
    into two weights."""
    attrs: BatchNormAttrs = node.attrs
    x, scale, bias, mean, var = (node.input(i) for i in range(5))
    dtype = x.type.dtype
    channels = x.type.shape[1]
    std = graph.add("Sqrt", graph.add("Add", var, scalar(graph, attrs.epsilon, dtype, "epsilon")))
    s = graph.add("Div", scale, std, name=f"{node.name}.scale")
    t = graph.add("Sub", bias, graph.add("Mul", mean, s), name=f"{node.name}.shift")
    per_channel = ReshapeAttrs((channels,) + (1,) * (x.type.rank - 2))
    s = graph.add("Reshape", s, attrs=per_channel)
    t = graph.add("Reshape", t, attrs=per_channel)
    return [graph.add("Add", graph.add("Mul", x, s), t, name=node.name)]
