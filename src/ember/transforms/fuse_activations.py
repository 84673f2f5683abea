"""Fusing activations and residual Adds into the epilogue of the producing convolution or
dense layer (FusedConv, FullyConnected)."""
from __future__ import annotations

import dataclasses
from typing import Any

from ember.graph import Constant, Node, Value
from ember.ops.fused import ACTIVATION_OPS, Epilogue, FusedConvAttrs, epilogue_of, get_activation
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import producer, scalar_value
from ember.transforms.dense import build_fully_connected, dense_form

_CORES = ("Conv", "FusedConv", "FullyConnected", "MatMul", "Gemm")


def _fusable_core(rw: Rewriter, value: Value) -> Node | None:
    """The conv or dense node computing `value` if an epilogue can be added to it: only one
    node reads it, it has no activation yet, and a MatMul/Gemm has a constant weight."""
    core = producer(value, *_CORES)
    if core is None or not rw.has_one_use(value):
        return None
    if core.op in ("FusedConv", "FullyConnected") and core.attrs.activation != "none":
        return None
    # Dense cores are rebuilt from their Dense form, which needs constant weights.
    if core.op in ("MatMul", "Gemm", "FullyConnected") and dense_form(core) is None:
        return None
    return core


def _fused_conv_parts(core: Node) -> tuple[FusedConvAttrs, list[Value | None]]:
    """A Conv or FusedConv as FusedConv attributes and its four operands."""
    if core.op == "FusedConv":
        return core.attrs, list(core.inputs)
    conv = core.attrs
    return FusedConvAttrs(conv.strides, conv.pads, conv.dilations, conv.group), [*core.inputs, None]


def _rebuild(rw: Rewriter, core: Node, residual: Value | None, activation: Epilogue | None) -> Value:
    """`core` as a FusedConv or FullyConnected with the residual and/or activation added."""
    updates: dict[str, Any] = {}
    if activation is not None:
        updates = dict(zip(("activation", "alpha", "beta"), activation, strict=True))
    if core.op in ("Conv", "FusedConv"):
        attrs, operands = _fused_conv_parts(core)
        if residual is not None:
            operands[3] = residual
        (y,) = rw.add_node("FusedConv", operands, dataclasses.replace(attrs, **updates), name=core.name)
        return y
    form = dense_form(core)
    assert form is not None, "_fusable_core checked the dense form"
    form.attrs = dataclasses.replace(form.attrs, **updates)
    if residual is not None:
        form.residual = residual
    return build_fully_connected(rw, form, core.name)


@pattern(*ACTIVATION_OPS)
def fuse_activation(rw: Rewriter, node: Node) -> Value | None:
    activation = epilogue_of(node.op, node.attrs)
    core = _fusable_core(rw, node.input(0))
    if activation is None or core is None:
        return None
    return _rebuild(rw, core, None, activation)


@pattern("Add")
def fuse_residual_add(rw: Rewriter, node: Node) -> Value | None:
    a, b = node.input(0), node.input(1)
    for value, residual in ((a, b), (b, a)):
        core = _fusable_core(rw, value)
        # Constants are biases, which fold-conv-arithmetic and form-fully-connected handle;
        # the residual must have exactly the result's type (no broadcasting in the epilogue).
        if core is None or isinstance(residual, Constant) or residual.type != node.outputs[0].type:
            continue
        if value.type != residual.type or _has_residual(core):
            continue
        return _rebuild(rw, core, residual, None)
    return None


@pattern("Mul", "Add")
def fuse_activation_affine(rw: Rewriter, node: Node) -> Value | None:
    """A scalar Mul or Add after a fused activation whose alpha and beta are its result's scale
    and shift (hard_swish): s * (a * f + b) = (s * a) * f + s * b; (a * f + b) + c = a * f + (b + c)."""
    for value, other in ((node.input(0), node.input(1)), (node.input(1), node.input(0))):
        core = producer(value, "FusedConv", "FullyConnected")
        number = scalar_value(other)
        if core is None or number is None or not rw.has_one_use(value) or value.type != node.outputs[0].type:
            continue
        attrs = core.attrs
        if not get_activation(attrs.activation).affine:
            continue
        alpha, beta = (attrs.alpha * number, attrs.beta * number) if node.op == "Mul" else \
            (attrs.alpha, attrs.beta + number)
        (y,) = rw.add_node(core.op, list(core.inputs), dataclasses.replace(attrs, alpha=alpha, beta=beta),
                           name=core.name)
        return y
    return None


def _has_residual(core: Node) -> bool:
    if core.op in ("FusedConv", "FullyConnected"):
        return core.inputs[3] is not None
    if core.op == "Gemm":
        form = dense_form(core)
        return form is None or form.residual is not None or form.residual_data is not None
    return False


@register_pass
class FuseActivations(RewritePass):
    """Preconditions: only the fused node reads the producer's result and it is not a graph
    output (the unfused value would otherwise still be needed); MatMul/Gemm producers need a
    constant weight (they become FullyConnected).
    Rules:
    1. act(Conv | FusedConv(act=none)) -> FusedConv(act) and
       act(MatMul | Gemm | FullyConnected(act=none)) -> FullyConnected(act), for act an op of
       the activation table (ops/fused.py ACTIVATION_TABLE: Relu, Clip with both bounds or
       min=0 alone as relu, LeakyRelu, Sigmoid, Tanh, HardSigmoid, Gelu with approximate=none,
       HardSwish, Silu).
    2. Mul(core, s) or Add(core, s), s a one-element constant, for a core whose activation's
       alpha and beta scale and shift its result (hard_swish) -> the core with them updated
       (PP-LCNet's learnable affine block after each activation).
    3. Add(core, r) or Add(r, core) for the same cores with no activation and no residual yet,
       r a non-constant value of exactly the result's type -> core with residual r (the
       epilogue computes act(core + bias + residual), so a later activation still fuses)."""

    name = "fuse-activations"
    patterns = (fuse_activation, fuse_activation_affine, fuse_residual_add)
