"""Folding inference-mode BatchNormalization into the preceding convolution or dense layer."""
from __future__ import annotations

import numpy as np

from ember.graph import Node, Value
from ember.ops.layouts import channels_last
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import constant_data, producer
from ember.transforms.dense import build_fully_connected, dense_form


def _affine(bn: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """BN(y) = y * s + t per channel, with s = scale / sqrt(var + eps), t = bias - mean * s;
    None unless all four statistics are constants."""
    arrays = [a for a in (constant_data(v) for v in bn.inputs[1:]) if a is not None]
    if len(arrays) != len(bn.inputs) - 1:
        return None
    scale, bias, mean, var = (a.astype(np.float64) for a in arrays)
    s = scale / np.sqrt(var + bn.attrs.epsilon)
    return s, bias - mean * s


def _foldable_producer(rw: Rewriter, bn: Node, ops: tuple[str, ...]) -> Node | None:
    node = producer(bn.input(0), *ops)
    if node is None or not rw.has_one_use(bn.input(0)) or channels_last(node.attrs):
        return None
    # A fused epilogue would sit between the core and the normalization.
    if node.op in ("FusedConv", "FullyConnected"):
        if node.attrs.activation != "none" or node.inputs[3] is not None:
            return None
    return node


@pattern("BatchNormalization")
def fold_into_conv(rw: Rewriter, bn: Node) -> Value | None:
    conv = _foldable_producer(rw, bn, ("Conv", "FusedConv"))
    affine = _affine(bn)
    if conv is None or affine is None:
        return None
    w, b = constant_data(conv.inputs[1]), constant_data(conv.inputs[2])
    if w is None or (conv.inputs[2] is not None and b is None):
        return None
    s, t = affine
    dtype = w.dtype
    # Output channel m of the conv is w[m] (whatever the group), so scaling w[m] scales it.
    new_w = w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))
    new_b = t if b is None else b.astype(np.float64) * s + t
    operands = list(conv.inputs)
    operands[1] = rw.constant(new_w.astype(dtype), f"{conv.name}.w")
    operands[2] = rw.constant(new_b.astype(dtype), f"{conv.name}.b")
    (y,) = rw.add_node(conv.op, operands, conv.attrs, name=conv.name)
    return y


@pattern("BatchNormalization")
def fold_into_dense(rw: Rewriter, bn: Node) -> Value | None:
    """Only rank-2 results: BN normalizes axis 1, which is then the dense layer's N axis."""
    node = _foldable_producer(rw, bn, ("MatMul", "Gemm", "FullyConnected"))
    affine = _affine(bn)
    if node is None or affine is None or node.outputs[0].type.rank != 2:
        return None
    form = dense_form(node)
    if form is None or form.residual is not None:
        return None
    s, t = affine
    dtype = form.w.dtype
    form.w = (form.w.astype(np.float64) * s).astype(dtype)
    form.b = (t if form.b is None else form.b.astype(np.float64) * s + t).astype(dtype)
    if form.residual_data is not None:
        form.residual_data = (form.residual_data.astype(np.float64) * s).astype(dtype)
    return build_fully_connected(rw, form, node.name)


@register_pass
class FoldBatchNorm(RewritePass):
    """Preconditions: inference mode; the BatchNormalization statistics, the weights and the
    bias of the producer are constants, and only the BatchNormalization reads the producer
    (otherwise the unnormalized result is still needed).
    With s = scale / sqrt(var + eps) and t = bias - mean * s per channel:
    1. BN(Conv/FusedConv(x, w, b)) -> Conv/FusedConv(x, w * s[m], b * s + t) (a FusedConv
       only without activation or residual, which would come between).
    2. BN(MatMul/Gemm/FullyConnected(x, W, b)) with a rank-2 result and a constant weight ->
       FullyConnected(x, W * s[n], b * s + t) (a constant Gemm residual is scaled too)."""

    name = "fold-batchnorm"
    patterns = (fold_into_conv, fold_into_dense)
