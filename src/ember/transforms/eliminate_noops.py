"""Removal of nodes that return their input unchanged."""
from __future__ import annotations

from ember.graph import Node, Value
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import is_splat


def _same_type(node: Node, x: Value | None) -> Value | None:
    """x if the node's result has exactly x's type (so it can stand in for it), else None."""
    if x is None or node.outputs[0].type != x.type:
        return None
    return x


@pattern("Reshape", "Expand", "Tile", "Cast")
def identity_shape_op(rw: Rewriter, node: Node) -> Value | None:
    """A reshape to the same shape, an expand or tile that grows nothing, a cast to the same
    element type: each is the identity exactly when the result type equals the input type."""
    return _same_type(node, node.inputs[0])


@pattern("Transpose")
def identity_transpose(rw: Rewriter, node: Node) -> Value | None:
    # Only the identity permutation: a transpose of equal-sized axes keeps the type but not the data.
    if tuple(node.attrs.perm) != tuple(range(len(node.attrs.perm))):
        return None
    return node.inputs[0]


@pattern("Pad")
def zero_pad(rw: Rewriter, node: Node) -> Value | None:
    if any(node.attrs.pads):
        return None
    return node.inputs[0]


@pattern("Slice")
def full_slice(rw: Rewriter, node: Node) -> Value | None:
    x = node.input(0)
    attrs = node.attrs
    for axis, start, end, step in zip(attrs.axes, attrs.starts, attrs.ends, attrs.steps, strict=True):
        # A reversed full slice (step -1) keeps the shape but not the order.
        if step != 1 or start != 0 or end < x.type.shape[axis]:
            return None
    return _same_type(node, x)


@pattern("Clip")
def unbounded_clip(rw: Rewriter, node: Node) -> Value | None:
    if node.attrs.min is not None or node.attrs.max is not None:
        return None
    return node.inputs[0]


@pattern("MaxPool", "AveragePool")
def unit_pool(rw: Rewriter, node: Node) -> Value | None:
    attrs = node.attrs
    if any(k != 1 for k in attrs.kernel) or any(s != 1 for s in attrs.strides) or any(attrs.pads):
        return None
    return _same_type(node, node.inputs[0])


# For each op: the constant that leaves the other operand unchanged, and whether that
# constant may stand on the left too.
_NEUTRAL = {"Add": (0.0, True), "Sub": (0.0, False), "Mul": (1.0, True), "Div": (1.0, False),
            "Pow": (1.0, False)}


@pattern(*_NEUTRAL)
def neutral_operand(rw: Rewriter, node: Node) -> Value | None:
    """x+0, 0+x, x-0, x*1, 1*x, x/1, x^1 (the constant may be any all-equal tensor, but it
    must not broadcast x to a larger shape)."""
    number, either_side = _NEUTRAL[node.op]
    a, b = node.inputs
    if is_splat(b, number):
        return _same_type(node, a)
    if either_side and is_splat(a, number):
        return _same_type(node, b)
    return None


@register_pass
class EliminateNoops(RewritePass):
    """Preconditions: none. Each rule replaces a node by its input when the result type equals
    the input type (so broadcasting never changes a shape):
    1. Reshape to the input's shape; Expand or Tile that grows nothing; Cast to the input's
       element type.
    2. Transpose with the identity permutation.
    3. Pad with all pads zero.
    4. Slice that keeps every element in order (start 0, step 1, to the end on every axis).
    5. Clip with neither bound.
    6. MaxPool / AveragePool with a 1x1 window, stride 1 and no padding.
    7. x+0, 0+x, x-0, x*1, 1*x, x/1, x^1 with an all-equal constant."""

    name = "eliminate-noops"
    patterns = (identity_shape_op, identity_transpose, zero_pad, full_slice, unbounded_clip, unit_pool,
                neutral_operand)
