"""Forming FullyConnected nodes from MatMul and Gemm with constant weights, and folding bias
Adds into them."""
from __future__ import annotations

import numpy as np

from ember.graph import Node, Value
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import channel_vector, constant_data, producer
from ember.transforms.dense import build_fully_connected, dense_form


@pattern("Gemm", "MatMul")
def dense_to_fully_connected(rw: Rewriter, node: Node) -> Value | None:
    form = dense_form(node)
    if form is None:
        return None
    return build_fully_connected(rw, form, node.name)


@pattern("Add")
def fold_bias_add(rw: Rewriter, node: Node) -> Value | None:
    """Add(FullyConnected(x, w, b?), c) with c a constant varying only along the last axis."""
    a, b = node.input(0), node.input(1)
    for fc_out, other in ((a, b), (b, a)):
        fc = producer(fc_out, "FullyConnected")
        data = constant_data(other)
        if fc is None or data is None or not rw.has_one_use(fc_out):
            continue
        if fc.attrs.activation != "none" or fc.inputs[3] is not None:
            continue  # the bias must be added before the residual and the activation
        if node.outputs[0].type != fc_out.type:
            continue
        form = dense_form(fc)
        vector = channel_vector(data, fc_out.type.shape, axis=fc_out.type.rank - 1)
        if form is None or vector is None:
            continue
        bias = vector.astype(np.float64) if form.b is None else form.b.astype(np.float64) + vector
        form.b = bias.astype(form.w.dtype)
        return build_fully_connected(rw, form, fc.name)
    return None


@register_pass
class FormFullyConnected(RewritePass):
    """Preconditions: the weight is a constant (backends pre-pack it at compile time).
    Rules:
    1. MatMul(x, W) with W a constant [K, N] and x of rank >= 2 -> FullyConnected(x, W).
    2. Gemm(A, B, C) with B constant -> FullyConnected(A or A^T, alpha * op(B), bias): B is
       transposed at compile time for transB; beta * C becomes the bias when it varies only
       along N, a constant residual when it is a full constant, the residual when it is a
       value of the result's type and beta is 1 (otherwise the Gemm stays).
    3. Add(FullyConnected(x, W, b?), c), with c a constant that varies only along the last
       axis and does not broadcast the result larger, folds c into the bias (only into a
       FullyConnected without residual or activation, which the bias must precede)."""

    name = "form-fully-connected"
    patterns = (dense_to_fully_connected, fold_bias_add)
