"""Unfusing: FusedConv, FullyConnected, InvertedResidual and FusedAttention back into their parts, for
backends that do not run them natively (the interpreter among them, so the oracle checks the fusion
passes)."""
from __future__ import annotations

from ember.graph import Graph, Node, Value
from ember.lowering.einsum import reshape, transpose
from ember.lowering.engine import lowering, scalar
from ember.ops.fused import FullyConnectedAttrs, FusedConvAttrs, get_activation
from ember.ops.fused_attention import FusedAttentionAttrs
from ember.ops.inverted_residual import InvertedResidualAttrs
from ember.ops.layouts import TO_NCHW, TO_NHWC
from ember.ops.normalization import SoftmaxAttrs


def _activation(graph: Graph, y: Value, activation: str, alpha: float, beta: float, name: str) -> Value:
    act = get_activation(activation)
    if act.op is None:
        return y
    attrs = act.op_attrs(alpha, beta) if act.op_attrs is not None else None
    y = graph.add(act.op, y, attrs=attrs, name=name)
    if act.affine and alpha != 1.0:
        y = graph.add("Mul", y, scalar(graph, alpha, y.type.dtype, f"{name}.scale"), name=f"{name}.scale")
    if act.affine and beta != 0.0:
        y = graph.add("Add", y, scalar(graph, beta, y.type.dtype, f"{name}.shift"), name=f"{name}.shift")
    return y


@lowering("FusedConv")
def lower_fused_conv(graph: Graph, node: Node) -> list[Value]:
    """Back into Conv, Add and the activation (between Transposes from and to NHWC where it is
    channels last)."""
    x, w, b, residual = node.inputs
    attrs: FusedConvAttrs = node.attrs
    if attrs.x_channels_last:
        x = transpose(graph, node.input(0), TO_NCHW, f"{node.name}.x")
    if attrs.y_channels_last and residual is not None:
        residual = transpose(graph, residual, TO_NCHW, f"{node.name}.residual")
    y = graph.add("Conv", x, w, b, attrs=attrs.conv, name=f"{node.name}.conv")
    if residual is not None:
        y = graph.add("Add", y, residual, name=f"{node.name}.residual")
    y = _activation(graph, y, attrs.activation, attrs.alpha, attrs.beta, f"{node.name}.act")
    return [transpose(graph, y, TO_NHWC, f"{node.name}.y") if attrs.y_channels_last else y]


@lowering("FullyConnected")
def lower_fully_connected(graph: Graph, node: Node) -> list[Value]:
    x, w, b, residual = node.inputs
    attrs: FullyConnectedAttrs = node.attrs
    y = graph.add("MatMul", x, w, name=f"{node.name}.matmul")
    if b is not None:
        y = graph.add("Add", y, b, name=f"{node.name}.bias")
    if residual is not None:
        y = graph.add("Add", y, residual, name=f"{node.name}.residual")
    return [_activation(graph, y, attrs.activation, attrs.alpha, attrs.beta, f"{node.name}.act")]


@lowering("InvertedResidual")
def lower_inverted_residual(graph: Graph, node: Node) -> list[Value]:
    """Back into its expansion, depthwise and projection FusedConvs (between Transposes from
    and to NHWC when it is channels last)."""
    x, w_expand, b_expand, w_depthwise, b_depthwise, w_project, b_project, residual = node.inputs
    attrs: InvertedResidualAttrs = node.attrs
    if attrs.x_channels_last:
        x = transpose(graph, node.input(0), TO_NCHW, f"{node.name}.x")
    if attrs.y_channels_last and residual is not None:
        residual = transpose(graph, residual, TO_NCHW, f"{node.name}.residual")
    e = graph.add("FusedConv", x, w_expand, b_expand, None, attrs=attrs.expand(), name=f"{node.name}.expand")
    d = graph.add("FusedConv", e, w_depthwise, b_depthwise, None, attrs=attrs.depthwise(e.type.shape[1]),
                  name=f"{node.name}.depthwise")
    y = graph.add("FusedConv", d, w_project, b_project, residual, attrs=attrs.project(), name=f"{node.name}.project")
    return [transpose(graph, y, TO_NHWC, f"{node.name}.y") if attrs.y_channels_last else y]


@lowering("FusedAttention")
def lower_fused_attention(graph: Graph, node: Node) -> list[Value]:
    """Back into the chain it was recognized from: heads split off by Reshape and Transpose,
    MatMul, the scale, the mask Add, Softmax, MatMul, and the heads merged back."""
    q, k, v, mask = node.input(0), node.input(1), node.input(2), node.inputs[3]
    attrs: FusedAttentionAttrs = node.attrs
    h, name = attrs.heads, node.name
    b, s = q.type.shape[:2]

    def split(x: Value, perm: tuple[int, ...], label: str) -> Value:
        parts = reshape(graph, x, (x.type.shape[0], x.type.shape[1], h, x.type.shape[2] // h), f"{name}.{label}")
        return transpose(graph, parts, perm, f"{name}.{label}")

    scores = graph.add("MatMul", split(q, (0, 2, 1, 3), "q"), split(k, (0, 2, 3, 1), "k"), name=f"{name}.qk")
    scores = graph.add("Mul", scores, scalar(graph, attrs.scale, q.type.dtype, f"{name}.scale"), name=f"{name}.scale")
    if mask is not None:
        scores = graph.add("Add", scores, mask, name=f"{name}.mask")
    probs = graph.add("Softmax", scores, attrs=SoftmaxAttrs(-1), name=f"{name}.softmax")
    heads = graph.add("MatMul", probs, split(v, (0, 2, 1, 3), "v"), name=f"{name}.pv")
    merged = transpose(graph, heads, (0, 2, 1, 3), f"{name}.y")
    return [reshape(graph, merged, (b, s, heads.type.shape[1] * heads.type.shape[3]), f"{name}.y")]
