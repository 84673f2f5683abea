"""Concat and Slice simplification."""
from __future__ import annotations

from ember.graph import Node, Value
from ember.ops.shape_util import normalize_axis
from ember.ops.tensor import AxisAttrs
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import producer


def _axis(node: Node) -> int:
    return normalize_axis(node.attrs.axis, node.outputs[0].type.rank)


def _operands(concat: Node) -> list[Value]:
    """A Concat's operands (it has no optional ones)."""
    return [concat.input(i) for i in range(len(concat.inputs))]


@pattern("Concat")
def single_operand_concat(rw: Rewriter, node: Node) -> Value | None:
    if len(node.inputs) != 1:
        return None
    return node.inputs[0]


@pattern("Concat")
def flatten_nested_concat(rw: Rewriter, node: Node) -> Value | None:
    axis = _axis(node)
    operands: list[Value] = []
    flattened = False
    for value in _operands(node):
        inner = producer(value, "Concat")
        # Only an inner concat that nothing else reads: otherwise it is computed anyway and
        # flattening would copy its data a second time.
        if inner is not None and _axis(inner) == axis and rw.only_used_by(value, [node]):
            operands.extend(_operands(inner))
            flattened = True
        else:
            operands.append(value)
    if not flattened:
        return None
    return rw.add("Concat", *operands, attrs=AxisAttrs(axis))


@pattern("Concat")
def drop_empty_operands(rw: Rewriter, node: Node) -> Value | None:
    axis = _axis(node)
    kept = [v for v in _operands(node) if v.type.shape[axis] != 0]
    if len(kept) == len(node.inputs) or not kept:
        return None
    if len(kept) == 1:
        return kept[0]
    return rw.add("Concat", *kept, attrs=AxisAttrs(axis))


def _slice_range(node: Node, axis: int) -> tuple[int, int] | None:
    """[start, end) along `axis` if the slice is contiguous there and keeps every other axis
    whole; None otherwise."""
    x = node.input(0)
    attrs = node.attrs
    found = (0, x.type.shape[axis])
    for a, start, end, step in zip(attrs.axes, attrs.starts, attrs.ends, attrs.steps, strict=True):
        if step != 1:
            return None
        if a == axis:
            found = (start, min(end, x.type.shape[axis]))
        elif start != 0 or end < x.type.shape[a]:
            return None
    return found


@pattern("Slice")
def slice_of_concat(rw: Rewriter, node: Node) -> Value | None:
    """Slice(Concat(a, b, c)) picking exactly whole operands -> those operands."""
    concat = producer(node.inputs[0], "Concat")
    if concat is None:
        return None
    axis = _axis(concat)
    bounds = _slice_range(node, axis)
    if bounds is None:
        return None
    picked: list[Value] = []
    offset = 0
    for value in _operands(concat):
        size = value.type.shape[axis]
        if bounds[0] <= offset and offset + size <= bounds[1] and size > 0:
            picked.append(value)
        elif offset < bounds[1] and offset + size > bounds[0]:
            return None  # the slice cuts through this operand
        offset += size
    if not picked or sum(v.type.shape[axis] for v in picked) != bounds[1] - bounds[0]:
        return None
    if len(picked) == 1:
        return picked[0]
    return rw.add("Concat", *picked, attrs=AxisAttrs(axis))


@register_pass
class SimplifyConcatSlice(RewritePass):
    """Preconditions: none.
    Rules:
    1. Concat(x) -> x.
    2. Concat(.., Concat(a, b, axis=k), .., axis=k) -> Concat(.., a, b, .., axis=k) when only
       the outer concat reads the inner one.
    3. Concat operands that are empty along the axis are dropped (a lone survivor replaces
       the concat).
    4. Slice(Concat(..., axis=k)) with step 1 along k, whole along every other axis, whose
       range is exactly a run of whole operands -> that operand, or a Concat of that run."""

    name = "simplify-concat-slice"
    patterns = (single_operand_concat, flatten_nested_concat, drop_empty_operands, slice_of_concat)
