"""Recognition of Softmax from Exp / ReduceSum(Exp), with or without max subtraction."""
from __future__ import annotations

from ember.graph import Node, Value
from ember.ops.normalization import SoftmaxAttrs
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import producer


def _single_axis(node: Node) -> int | None:
    """The one axis a keepdims reduction reduces, or None."""
    attrs = node.attrs
    if not attrs.keepdims or len(attrs.axes) != 1:
        return None
    return attrs.axes[0] % node.input(0).type.rank


def _unshifted(rw: Rewriter, value: Value, axis: int) -> Value:
    """x for value = Sub(x, ReduceMax(x, axis)) read only by the Exp; else value itself
    (softmax is shift-invariant, so either is the Softmax input; the max only adds range)."""
    sub = producer(value, "Sub")
    if sub is None or not rw.has_one_use(value):
        return value
    x, peak = sub.input(0), sub.input(1)
    reduce_max = producer(peak, "ReduceMax")
    if reduce_max is None or reduce_max.inputs[0] is not x or not rw.has_one_use(peak):
        return value
    if _single_axis(reduce_max) != axis:
        return value
    return x


@pattern("Div")
def recognize_softmax(rw: Rewriter, node: Node) -> Value | None:
    numerator, denominator = node.input(0), node.input(1)
    exp = producer(numerator, "Exp")
    total = producer(denominator, "ReduceSum")
    if exp is None or total is None or total.inputs[0] is not numerator:
        return None
    axis = _single_axis(total)
    if axis is None or not rw.has_one_use(denominator):
        return None
    # The exponentials feed only this sum and this division.
    if not rw.only_used_by(numerator, [node, total]) or node.outputs[0].type != numerator.type:
        return None
    x = _unshifted(rw, exp.input(0), axis)
    return rw.add("Softmax", x, attrs=SoftmaxAttrs(axis))


@register_pass
class RecognizeSoftmax(RewritePass):
    """Preconditions: the exponentials are read only by the sum and the division, and the sum
    reduces one axis with keepdims.
    Rules:
    1. Div(Exp(x), ReduceSum(Exp(x), axis=a, keepdims=1)) -> Softmax(x, axis=a).
    2. The same with x replaced by Sub(x, ReduceMax(x, axis=a, keepdims=1)) -> Softmax(x,
       axis=a) (when only the Exp reads the subtraction; else rule 1 applies to it)."""

    name = "recognize-softmax"
    patterns = (recognize_softmax,)
