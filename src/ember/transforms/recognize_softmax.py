"""Recognition of Softmax from Exp(x - max) / ReduceSum(Exp(x - max)).

Only the form that subtracts the maximum along the summed axis is Softmax to the last bit of
range: Softmax subtracts that maximum itself. Without it (or with another shift) the graph's
own Exp overflows to inf (inf / inf: NaN) or underflows to 0 (0 / 0: NaN) where Softmax
gives finite values, and Ember keeps the graph's meaning, as ONNX Runtime does."""
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


def _unshifted(rw: Rewriter, value: Value, axis: int) -> Value | None:
    """x for value = Sub(x, ReduceMax(x, axis)) read only by the Exp; else None."""
    sub = producer(value, "Sub")
    if sub is None or not rw.has_one_use(value):
        return None
    x, peak = sub.input(0), sub.input(1)
    reduce_max = producer(peak, "ReduceMax")
    if reduce_max is None or reduce_max.inputs[0] is not x or not rw.has_one_use(peak):
        return None
    if _single_axis(reduce_max) != axis:
        return None
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
    return None if x is None else rw.add("Softmax", x, attrs=SoftmaxAttrs(axis))


@register_pass
class RecognizeSoftmax(RewritePass):
    """Preconditions: the exponentials are read only by the sum and the division, the sum
    reduces one axis with keepdims, and only the Exp reads the subtraction.
    Rules:
    1. Div(Exp(s), ReduceSum(Exp(s), axis=a, keepdims=1)) with s = Sub(x, ReduceMax(x, axis=a,
       keepdims=1)) -> Softmax(x, axis=a). Exp(x) / ReduceSum(Exp(x)) stays: it overflows
       where Softmax does not (see the module docstring)."""

    name = "recognize-softmax"
    patterns = (recognize_softmax,)
