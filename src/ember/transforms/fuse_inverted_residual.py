"""MobileNetV2's inverted-residual block, FusedConv 1x1 -> depthwise FusedConv -> FusedConv
1x1 (+ residual), as one InvertedResidual node (ops/inverted_residual.py), so that the cpu
backend's kernel keeps the two wide intermediate tensors to itself, channels last. Only the
cpu backend's pipeline runs it (backends/cpu/backend.py), after fuse-activations."""
from __future__ import annotations

from ember.graph import Node, Value
from ember.ops.fused import FusedConvAttrs
from ember.ops.inverted_residual import InvertedResidualAttrs
from ember.ops.layouts import channels_last
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import constant_data, producer
from ember.types import DType

# The kernel computes 16 channels of the expanded tensor at a time (one AVX-512 vector).
CHANNEL_BLOCK = 16
# The fused kernel pays where the expanded tensors are the block's widest, by this factor over
# its input and output (MobileNetV2's blocks expand 6x: 3x over the widest end at least); a
# separable pair whose middle is no wider than its ends (PP-LCNet's pointwise -> depthwise ->
# pointwise) ran 2.4% slower fused than as three kernels (PP-OCRv4 recognizer, Zen 4).
EXPANSION = 2


def _stage(value: Value | None) -> Node | None:
    """The Conv or FusedConv computing `value` (NCHW at both ends)."""
    node = producer(value, "Conv", "FusedConv")
    return None if node is None or channels_last(node.attrs) else node


def _attrs(node: Node) -> FusedConvAttrs:
    """A Conv's or FusedConv's attributes as FusedConv's (a Conv has no activation)."""
    if node.op == "FusedConv":
        return node.attrs
    conv = node.attrs
    return FusedConvAttrs(tuple(conv.strides), tuple(conv.pads), tuple(conv.dilations), conv.group)


def _residual(node: Node) -> Value | None:
    return node.inputs[3] if node.op == "FusedConv" else None


def _pointwise(node: Node) -> bool:
    attrs = _attrs(node)
    w = node.input(1)
    return (attrs.group == 1 and w.type.rank == 4 and w.type.shape[2:] == (1, 1) and tuple(attrs.strides) == (1, 1)
            and tuple(attrs.pads) == (0, 0, 0, 0) and tuple(attrs.dilations) == (1, 1))


def _depthwise(node: Node) -> bool:
    attrs = _attrs(node)
    w, y = node.input(1), node.outputs[0]
    channels = node.input(0).type.shape[1]
    strides = tuple(attrs.strides)
    return (w.type.rank == 4 and attrs.group == channels == y.type.shape[1] and w.type.shape[1] == 1
            and tuple(attrs.dilations) == (1, 1) and strides in ((1, 1), (2, 2)) and w.type.shape[2] <= 8
            and w.type.shape[3] <= 8 and _residual(node) is None)


def _weights_constant(node: Node) -> bool:
    return constant_data(node.input(1)) is not None and (node.inputs[2] is None or constant_data(node.inputs[2])
                                                         is not None)


@pattern("Conv", "FusedConv")
def fuse_inverted_residual(rw: Rewriter, node: Node) -> Value | None:
    x = node.input(0)
    if node.outputs[0].type.dtype is not DType.FLOAT32 or x.type.rank != 4 or channels_last(node.attrs) \
            or not _pointwise(node):
        return None
    depthwise = _stage(x)
    if depthwise is None or not rw.has_one_use(x) or not _depthwise(depthwise):
        return None
    e = depthwise.input(0)
    expand = _stage(e)
    if expand is None or not rw.has_one_use(e) or not _pointwise(expand) or _residual(expand) is not None:
        return None
    if e.type.shape[1] % CHANNEL_BLOCK or not all(_weights_constant(n) for n in (expand, depthwise, node)):
        return None
    if e.type.shape[1] < EXPANSION * max(expand.input(0).type.shape[1], node.outputs[0].type.shape[1]):
        return None
    ea, da, pa = _attrs(expand), _attrs(depthwise), _attrs(node)
    attrs = InvertedResidualAttrs(tuple(da.strides), tuple(da.pads), ea.activation, ea.alpha, ea.beta, da.activation,
                                  da.alpha, da.beta, pa.activation, pa.alpha, pa.beta)
    operands = [expand.input(0), expand.input(1), expand.inputs[2], depthwise.input(1), depthwise.inputs[2],
                node.input(1), node.inputs[2], _residual(node)]
    (y,) = rw.add_node("InvertedResidual", operands, attrs, name=node.name)
    return y


@register_pass
class FuseInvertedResidual(RewritePass):
    """Preconditions: fuse-activations has run (each stage's bias, activation and residual
    are in its FusedConv).
    Rules:
    1. 1x1 Conv/FusedConv (stride 1, no padding, no residual) -> depthwise Conv/FusedConv
       (any kernel up to 8x8, stride 1 or 2, no dilation, no residual) -> 1x1 Conv/FusedConv
       (stride 1, no padding, residual allowed), float32 with constant weights and biases, the two
       intermediate results read only by the next stage, and the expanded channel count a
       multiple of 16 and at least EXPANSION times the block's input and output channels ->
       InvertedResidual with the three stages' activations."""

    name = "fuse-inverted-residual"
    patterns = (fuse_inverted_residual,)
