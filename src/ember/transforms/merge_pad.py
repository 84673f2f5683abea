"""Merging an explicit Pad into the padding of the window op that reads it."""
from __future__ import annotations

import dataclasses
import math

from ember.graph import Node, Value
from ember.ops.fused import get_activation
from ember.ops.layouts import channels_last
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import producer

# Producers whose results are never negative (NaN aside), for rule 3.
_NON_NEGATIVE_OPS = {"Relu", "Sigmoid", "HardSigmoid", "Exp", "Abs", "Softmax"}


def _spatial_pads(pad: Node) -> tuple[int, ...] | None:
    """The Pad's begin/end pads on the spatial axes, in window-op order (begins then ends),
    if it pads in constant mode, never crops, and leaves batch and channel axes alone."""
    attrs = pad.attrs
    rank = len(attrs.pads) // 2
    begins, ends = attrs.pads[:rank], attrs.pads[rank:]
    if attrs.mode != "constant" or any(p < 0 for p in attrs.pads):
        return None
    if begins[:2] != (0, 0) or ends[:2] != (0, 0):
        return None
    return tuple(begins[2:]) + tuple(ends[2:])


def _merged(node: Node, extra: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(a + b for a, b in zip(node.attrs.pads, extra, strict=True))


def _known_non_negative(value: Value) -> bool:
    node = producer(value)
    if node is None:
        return False
    if node.op in _NON_NEGATIVE_OPS:
        return True
    if node.op == "Clip":
        return node.attrs.min is not None and node.attrs.min >= 0
    if node.op in ("FusedConv", "FullyConnected"):
        return get_activation(node.attrs.activation).non_negative(node.attrs.alpha, node.attrs.beta)
    return False


@pattern("Conv", "FusedConv", "AveragePool", "MaxPool")
def merge_pad(rw: Rewriter, node: Node) -> Value | None:
    pad = producer(node.inputs[0], "Pad")
    if pad is None or channels_last(node.attrs):  # the Pad's axes are NCHW
        return None
    extra = _spatial_pads(pad)
    if extra is None:
        return None
    attrs = node.attrs
    value = pad.attrs.value
    if node.op in ("Conv", "FusedConv"):
        if value != 0:
            return None
        new_attrs = dataclasses.replace(attrs, pads=_merged(node, extra))
    elif node.op == "AveragePool":
        # The explicit zeros count in the average, so the merged pads must count too; that
        # is only expressible when the pool's own pads count as well (or it has none).
        if value != 0 or (any(attrs.pads) and not attrs.count_include_pad):
            return None
        new_attrs = dataclasses.replace(attrs, pads=_merged(node, extra), count_include_pad=True)
    else:
        if not _max_pool_pad_is_neutral(pad, value):
            return None
        pads = _merged(node, extra)
        # Every window must still see an input element, or an all-padding window would give
        # the pad value instead of -inf: keep each pad below the window extent.
        spatial = len(attrs.kernel)
        extents = [(k - 1) * d + 1 for k, d in zip(attrs.kernel, attrs.dilations, strict=True)]
        if any(pads[i] >= extents[i % spatial] for i in range(2 * spatial)):
            return None
        if attrs.ceil_mode or any(d != 1 for d in attrs.dilations):
            return None
        new_attrs = dataclasses.replace(attrs, pads=pads)
    (y,) = rw.add_node(node.op, [pad.inputs[0], *node.inputs[1:]], new_attrs, name=node.name)
    return y


def _max_pool_pad_is_neutral(pad: Node, value: float) -> bool:
    """MaxPool pads with -inf; an explicit pad value is neutral if it is -inf, or if it is 0
    and the padded tensor is known non-negative (then 0 never exceeds a real element)."""
    if math.isinf(value) and value < 0:
        return True
    return value == 0 and _known_non_negative(pad.input(0))


@register_pass
class MergePad(RewritePass):
    """Preconditions: the Pad is in constant mode, does not crop, and pads only the spatial
    axes (not batch or channels).
    Rules:
    1. Conv/FusedConv(Pad(x, 0)) -> Conv/FusedConv(x) with the pads added to its own.
    2. AveragePool(Pad(x, 0)) -> AveragePool(x, count_include_pad=1) with the pads added,
       when the pool has no pads of its own or already counts them.
    3. MaxPool(Pad(x, v)) -> MaxPool(x) with the pads added, when v is -inf, or v is 0 and x
       is known non-negative (a Relu, Sigmoid, Clip(min>=0)... or a fused op with such an
       activation); only without ceil_mode or dilation, and with every pad smaller than the
       window, so no window is all padding. Unsure cases are skipped.
    The Pad stays if other nodes read it."""

    name = "merge-pad"
    patterns = (merge_pad,)
