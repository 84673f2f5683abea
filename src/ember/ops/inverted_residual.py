"""InvertedResidual: MobileNetV2's block, a 1x1 expansion, a depthwise convolution and a 1x1
projection (each with its bias and activation, the projection with an optional residual), as
one op so that a backend can keep the two wide intermediate tensors inside one kernel
(codegen/kernels/inverted_residual.py). The cpu backend's pipeline forms it
(transforms/fuse_inverted_residual.py); a backend without a kernel for it gets it back as
its three FusedConv nodes (lowering/fused.py). Not a primitive.

`x_channels_last`, `y_channels_last`: x, and y with the residual, are NHWC ([N, H, W, C])
instead of NCHW (ops/layouts.py); the weights as they are. The assign-layouts pass
(transforms/layouts.py) sets them on chains of nodes that a backend runs channels last inside:
NHWC between the chain's nodes, NCHW where a node reads or writes outside it, so that no
transposes run."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.ops.fused import FusedConvAttrs, _fused_conv, _fused_conv_infer
from ember.ops.layouts import channels_last, infer_channels_last, reference_channels_last
from ember.ops.registry import OpDef, OpError, define_op

_POINTWISE = ((1, 1), (0, 0, 0, 0), (1, 1))


@dataclass(frozen=True)
class InvertedResidualAttrs:
    """The depthwise convolution's strides and pads (its dilations are 1), and each stage's
    activation as FusedConv has it."""

    strides: tuple[int, ...]
    pads: tuple[int, ...]
    expand_activation: str = "none"
    expand_alpha: float = 0.0
    expand_beta: float = 0.0
    depthwise_activation: str = "none"
    depthwise_alpha: float = 0.0
    depthwise_beta: float = 0.0
    project_activation: str = "none"
    project_alpha: float = 0.0
    project_beta: float = 0.0
    x_channels_last: bool = False
    y_channels_last: bool = False

    def expand(self) -> FusedConvAttrs:
        return FusedConvAttrs(*_POINTWISE, 1, self.expand_activation, self.expand_alpha, self.expand_beta)

    def depthwise(self, channels: int) -> FusedConvAttrs:
        return FusedConvAttrs(tuple(self.strides), tuple(self.pads), (1, 1), channels, self.depthwise_activation,
                              self.depthwise_alpha, self.depthwise_beta)

    def project(self) -> FusedConvAttrs:
        return FusedConvAttrs(*_POINTWISE, 1, self.project_activation, self.project_alpha, self.project_beta)


def _infer(attrs: InvertedResidualAttrs, types):
    x, w_expand, b_expand, w_depthwise, b_depthwise, w_project, b_project, residual = types
    if channels_last(attrs):
        return infer_channels_last("InvertedResidual", _infer, attrs, types)
    if x.rank != 4 or w_expand.rank != 4 or w_expand.shape[2:] != (1, 1) or w_project.rank != 4 \
            or w_project.shape[2:] != (1, 1):
        raise OpError(f"InvertedResidual needs NCHW x and 1x1 expansion and projection weights, got {x}, "
                      f"{w_expand} and {w_project}")
    (e,) = _fused_conv_infer(attrs.expand(), [x, w_expand, b_expand, None])
    if w_depthwise.rank != 4 or w_depthwise.shape[:2] != (e.shape[1], 1):
        raise OpError(f"InvertedResidual's depthwise weights must be [{e.shape[1]}, 1, kh, kw], got {w_depthwise}")
    (d,) = _fused_conv_infer(attrs.depthwise(e.shape[1]), [e, w_depthwise, b_depthwise, None])
    return _fused_conv_infer(attrs.project(), [d, w_project, b_project, residual])


def _reference(attrs: InvertedResidualAttrs, arrays):
    x, w_expand, b_expand, w_depthwise, b_depthwise, w_project, b_project, residual = arrays
    if channels_last(attrs):
        return reference_channels_last("InvertedResidual", _reference, attrs, arrays)
    (e,) = _fused_conv(attrs.expand(), [x, w_expand, b_expand, None])
    (d,) = _fused_conv(attrs.depthwise(e.shape[1]), [e, w_depthwise, b_depthwise, None])
    (y,) = _fused_conv(attrs.project(), [d, w_project, b_project, residual])
    return (np.asarray(y, dtype=x.dtype),)


define_op(OpDef("InvertedResidual", ("x", "w_expand", "b_expand?", "w_depthwise", "b_depthwise?", "w_project",
                                     "b_project?", "residual?"), ("y",), _infer, _reference,
                attrs=InvertedResidualAttrs, primitive=False))

__all__ = ["InvertedResidualAttrs"]
