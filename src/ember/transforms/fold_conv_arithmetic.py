"""Folding per-channel Mul/Div/Add/Sub by constants into a preceding convolution's weights
and bias."""
from __future__ import annotations

import numpy as np

from ember.graph import Node, Value
from ember.ops.layouts import channels_last
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import channel_vector, constant_data, producer


def _conv_operand(rw: Rewriter, node: Node, value: Value) -> Node | None:
    """The convolution producing `value` if its arithmetic can absorb a per-channel constant:
    only `node` reads it, weights and bias are constants, and a FusedConv has no epilogue
    that would come between."""
    conv = producer(value, "Conv", "FusedConv")
    if conv is None or not rw.has_one_use(value) or node.outputs[0].type != value.type or channels_last(conv.attrs):
        return None
    if conv.op == "FusedConv" and (conv.attrs.activation != "none" or conv.inputs[3] is not None):
        return None
    if constant_data(conv.inputs[1]) is None:
        return None
    if conv.inputs[2] is not None and constant_data(conv.inputs[2]) is None:
        return None
    return conv


def _weights(conv: Node) -> np.ndarray:
    """The weights of a conv that _conv_operand accepted (so they are a constant)."""
    data = constant_data(conv.inputs[1])
    assert data is not None, "_conv_operand checked the weights are a constant"
    return data


def _rebuild(rw: Rewriter, conv: Node, w: np.ndarray | None, b: np.ndarray | None) -> Value:
    """The conv with new weights and/or bias (None keeps the current operand)."""
    operands = list(conv.inputs)
    dtype = _weights(conv).dtype
    if w is not None:
        operands[1] = rw.constant(w.astype(dtype), f"{conv.name}.w")
    if b is not None:
        operands[2] = rw.constant(b.astype(dtype), f"{conv.name}.b")
    (y,) = rw.add_node(conv.op, operands, conv.attrs, name=conv.name)
    return y


@pattern("Mul", "Div", "Add", "Sub")
def fold_channel_constant(rw: Rewriter, node: Node) -> Value | None:
    a, b = node.input(0), node.input(1)
    # Mul and Add commute; Div and Sub fold only with the constant on the right.
    orders = [(a, b), (b, a)] if node.op in ("Mul", "Add") else [(a, b)]
    for value, other in orders:
        conv = _conv_operand(rw, node, value)
        data = constant_data(other)
        if conv is None or data is None:
            continue
        c = channel_vector(data, value.type.shape, axis=1)
        if c is None or (node.op == "Div" and not np.all(c)):
            continue
        c = c.astype(np.float64)
        w = _weights(conv).astype(np.float64)
        bias_data = constant_data(conv.inputs[2])
        bias = np.zeros(w.shape[0]) if bias_data is None else bias_data.astype(np.float64)
        per_channel = c.reshape((-1,) + (1,) * (w.ndim - 1))
        if node.op == "Mul":
            return _rebuild(rw, conv, w * per_channel, bias * c)
        if node.op == "Div":
            return _rebuild(rw, conv, w / per_channel, bias / c)
        return _rebuild(rw, conv, None, bias + c if node.op == "Add" else bias - c)
    return None


@register_pass
class FoldConvArithmetic(RewritePass):
    """Preconditions: the conv's weight and bias are constants, only the arithmetic node reads
    the conv, and the constant c varies at most along the channel axis (1) without
    broadcasting the result larger. A FusedConv qualifies only without activation or
    residual. With c[m] the per-channel value:
    1. Mul(conv(x, w, b), c) (either order) -> conv(x, w * c[m], b * c).
    2. Div(conv(x, w, b), c) -> conv(x, w / c[m], b / c), when c has no zero.
    3. Add(conv(x, w, b), c) (either order) -> conv(x, w, b + c); a missing b counts as 0.
    4. Sub(conv(x, w, b), c) -> conv(x, w, b - c)."""

    name = "fold-conv-arithmetic"
    patterns = (fold_channel_constant,)
