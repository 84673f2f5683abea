"""Shared by the passes that form or modify FullyConnected nodes (form-fully-connected,
fold-batchnorm, fuse-activations): reading a MatMul, Gemm or FullyConnected with a constant
weight as one `Dense` form, and building a FullyConnected from it.

A Dense is y = x @ w + b + residual with w a constant [K, N], b an optional constant [N]
and residual an optional value of y's type; `transpose_x` says x must be transposed first
(Gemm's transA)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ember.graph import Node, Value
from ember.ops.fused import FullyConnectedAttrs
from ember.ops.tensor import TransposeAttrs
from ember.passes import Rewriter
from ember.passes.match import channel_vector, constant_data


@dataclass
class Dense:
    x: Value
    w: np.ndarray
    b: np.ndarray | None = None
    residual: Value | None = None
    residual_data: np.ndarray | None = None  # a constant residual, built only if used
    transpose_x: bool = False
    attrs: FullyConnectedAttrs = dataclasses.field(default_factory=FullyConnectedAttrs)
    # The constants w and b came from, reused (keeping their names) while w and b are those
    # very arrays; a pass that computes new arrays gets new constants.
    sources: tuple[Value | None, Value | None] = (None, None)


def dense_form(node: Node) -> Dense | None:
    """The Dense form of a MatMul with a constant 2-D right operand, a Gemm with a constant B,
    or a FullyConnected with constant weight and bias; None for anything else."""
    if node.op == "MatMul":
        x, w = node.input(0), node.input(1)
        data = constant_data(w)
        if data is None or data.ndim != 2 or x.type.rank < 2:
            return None
        return Dense(x, data, sources=(w, None))
    if node.op == "Gemm":
        return _gemm_form(node)
    if node.op == "FullyConnected":
        x, w, b, residual = node.input(0), node.input(1), node.inputs[2], node.inputs[3]
        w_data, b_data = constant_data(w), constant_data(b)
        if w_data is None or (b is not None and b_data is None):
            return None
        return Dense(x, w_data, b_data, residual, attrs=node.attrs, sources=(w, b))
    return None


def _gemm_form(node: Node) -> Dense | None:
    a, b, c = node.input(0), node.input(1), node.inputs[2]
    attrs = node.attrs
    b_data = constant_data(b)
    if b_data is None:
        return None
    if attrs.alpha == 1.0 and not attrs.transB:
        form = Dense(a, b_data, transpose_x=attrs.transA, sources=(b, None))
    else:
        w = attrs.alpha * (b_data.astype(np.float64).T if attrs.transB else b_data.astype(np.float64))
        with np.errstate(over="ignore"):
            scaled_w = w.astype(b_data.dtype)
        # alpha folds into the weights only where the scaled weights stay finite: with a huge
        # alpha, alpha * (A B) is +-inf but A (alpha B) would mix inf and -inf into NaN.
        if np.issubdtype(scaled_w.dtype, np.floating) and not np.all(np.isfinite(scaled_w) | ~np.isfinite(w)):
            return None
        form = Dense(a, scaled_w, transpose_x=attrs.transA)
    if c is None or attrs.beta == 0.0:
        return form
    out_shape = node.outputs[0].type.shape
    c_data = constant_data(c)
    if c_data is not None and attrs.beta == 1.0 and c_data.shape == (out_shape[1],):
        form.b, form.sources = c_data, (form.sources[0], c)
        return form
    if c_data is not None:
        with np.errstate(over="ignore"):
            scaled = (attrs.beta * c_data.astype(np.float64)).astype(c_data.dtype)
        if np.issubdtype(scaled.dtype, np.floating) and np.any(np.isfinite(c_data) & ~np.isfinite(scaled)):
            return None
        vector = channel_vector(scaled, out_shape, axis=1)
        if vector is not None:
            form.b = vector
        else:
            form.residual_data = np.broadcast_to(scaled, out_shape).copy()
        return form
    if attrs.beta != 1.0 or c.type.shape != out_shape:
        return None
    form.residual = c
    return form


def build_fully_connected(rw: Rewriter, form: Dense, name: str) -> Value:
    x = form.x
    if form.transpose_x:
        x = rw.add("Transpose", x, attrs=TransposeAttrs((1, 0)), name=f"{name}.transA")
    w = _constant(rw, form.w, form.sources[0], f"{name}.w")
    b = None
    if form.b is not None:
        b = _constant(rw, form.b.astype(form.w.dtype, copy=False), form.sources[1], f"{name}.b")
    residual = form.residual
    if form.residual_data is not None:
        residual = rw.constant(form.residual_data, f"{name}.residual")
    return rw.add("FullyConnected", x, w, b, residual, attrs=form.attrs, name=name)


def _constant(rw: Rewriter, data: np.ndarray, source: Value | None, name: str) -> Value:
    if source is not None and constant_data(source) is data:
        return source
    return rw.constant(data, name)
