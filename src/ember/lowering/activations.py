"""Lowerings of the composite activations (ops/activations.py) into elementwise primitives:
Gelu to its erf or tanh formula, HardSwish to x * HardSigmoid(x), Silu to x * Sigmoid(x)."""
from __future__ import annotations

import math

from ember.graph import Graph, Node, Value
from ember.lowering.engine import lowering, scalar
from ember.ops.activations import (
    GELU_TANH_CUBIC,
    GELU_TANH_SCALE,
    HARD_SWISH_ALPHA,
    HARD_SWISH_BETA,
    GeluAttrs,
)
from ember.ops.elementwise import AlphaBetaAttrs


@lowering("Gelu")
def lower_gelu(graph: Graph, node: Node) -> list[Value]:
    """none: x * 0.5 * (1 + erf(x / sqrt(2)));
    tanh: x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
    x = node.input(0)
    attrs: GeluAttrs = node.attrs
    dtype = x.type.dtype
    name = node.name
    if attrs.approximate == "tanh":
        cube = graph.add("Mul", graph.add("Mul", x, x, name=f"{name}.sq"), x, name=f"{name}.cube")
        cubic = scalar(graph, GELU_TANH_CUBIC, dtype, "cubic")
        inner = graph.add("Add", x, graph.add("Mul", cube, cubic, name=f"{name}.cubic"), name=f"{name}.poly")
        scale = scalar(graph, GELU_TANH_SCALE, dtype, "scale")
        phi = graph.add("Tanh", graph.add("Mul", inner, scale, name=f"{name}.scaled"), name=f"{name}.tanh")
    else:
        rsqrt2 = scalar(graph, 1.0 / math.sqrt(2.0), dtype, "rsqrt2")
        phi = graph.add("Erf", graph.add("Mul", x, rsqrt2, name=f"{name}.scaled"), name=f"{name}.erf")
    one_plus = graph.add("Add", phi, scalar(graph, 1.0, dtype, "one"), name=f"{name}.one_plus")
    half_x = graph.add("Mul", x, scalar(graph, 0.5, dtype, "half"), name=f"{name}.half")
    return [graph.add("Mul", half_x, one_plus, name=name)]


@lowering("HardSwish")
def lower_hard_swish(graph: Graph, node: Node) -> list[Value]:
    x = node.input(0)
    gate = graph.add("HardSigmoid", x, attrs=AlphaBetaAttrs(HARD_SWISH_ALPHA, HARD_SWISH_BETA),
                     name=f"{node.name}.gate")
    return [graph.add("Mul", x, gate, name=node.name)]


@lowering("Silu")
def lower_silu(graph: Graph, node: Node) -> list[Value]:
    x = node.input(0)
    gate = graph.add("Sigmoid", x, name=f"{node.name}.gate")
    return [graph.add("Mul", x, gate, name=node.name)]
