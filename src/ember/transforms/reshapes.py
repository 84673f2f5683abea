"""Reshape chain merging."""
from __future__ import annotations

from ember.graph import Node, Value
from ember.ops.tensor import ReshapeAttrs
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import producer


@pattern("Reshape")
def merge_reshapes(rw: Rewriter, node: Node) -> Value | None:
    inner = producer(node.inputs[0], "Reshape")
    if inner is None:
        return None
    x = inner.input(0)
    shape = node.outputs[0].type.shape
    if x.type.shape == shape:
        return x
    return rw.add("Reshape", x, attrs=ReshapeAttrs(shape))


@register_pass
class MergeReshapes(RewritePass):
    """Preconditions: none (a reshape keeps the row-major element order, so any chain of
    reshapes equals one reshape to the last shape).
    Rules:
    1. Reshape(Reshape(x, s1), s2) -> Reshape(x, s2), or x when s2 is x's shape. The inner
       reshape stays only if something else reads it."""

    name = "merge-reshapes"
    patterns = (merge_reshapes,)
