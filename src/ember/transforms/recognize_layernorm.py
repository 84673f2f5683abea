"""Recognition of LayerNormalization from its reduction form, and folding the scale and bias
that follow it."""
from __future__ import annotations

import numpy as np

from ember.graph import Node, Value
from ember.ops.normalization import LayerNormAttrs
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import constant_data, producer, scalar_value


def _trailing_mean_axis(node: Node | None) -> int | None:
    """k for a ReduceMean over axes [k, rank) with keepdims, else None."""
    if node is None or not node.attrs.keepdims or not node.attrs.axes:
        return None
    rank = node.input(0).type.rank
    axes = tuple(sorted(a % rank for a in node.attrs.axes))
    if axes != tuple(range(axes[0], rank)):
        return None
    return axes[0]


def _squares_of(rw: Rewriter, value: Value, d: Value) -> Node | None:
    """The node computing d^2 as Pow(d, 2) or Mul(d, d), read only by the variance."""
    node = producer(value, "Pow", "Mul")
    if node is None or not rw.has_one_use(value):
        return None
    a, b = node.inputs
    if a is not d:
        return None
    if (node.op == "Pow" and scalar_value(b) == 2.0) or (node.op == "Mul" and b is d):
        return node
    return None


def _std_parts(rw: Rewriter, std: Value) -> tuple[Value, float] | None:
    """(variance, eps) for std = Sqrt(Add(variance, eps)), each read once."""
    sqrt = producer(std, "Sqrt")
    if sqrt is None or not rw.has_one_use(std):
        return None
    add = producer(sqrt.input(0), "Add")
    if add is None or not rw.has_one_use(sqrt.input(0)):
        return None
    a, b = add.input(0), add.input(1)
    for var, eps in ((a, b), (b, a)):
        epsilon = scalar_value(eps)
        if epsilon is not None and epsilon >= 0:
            return var, epsilon
    return None


def _divisor(rw: Rewriter, node: Node) -> tuple[Value, Value] | None:
    """(d, std) for Div(d, std) or Mul(d, Reciprocal(std)) in either order."""
    a, b = node.input(0), node.input(1)
    if node.op == "Div":
        return a, b
    for d, r in ((a, b), (b, a)):
        reciprocal = producer(r, "Reciprocal")
        if reciprocal is not None and rw.has_one_use(r):
            return d, reciprocal.input(0)
    return None


@pattern("Div", "Mul")
def recognize_layernorm(rw: Rewriter, node: Node) -> Value | None:
    parts = _divisor(rw, node)
    if parts is None:
        return None
    d, std = parts
    sub = producer(d, "Sub")
    if sub is None:
        return None
    x, mean = sub.input(0), sub.input(1)
    mean_node = producer(mean, "ReduceMean")
    axis = _trailing_mean_axis(mean_node)
    if mean_node is None or axis is None or mean_node.inputs[0] is not x or not rw.has_one_use(mean):
        return None
    std_parts = _std_parts(rw, std)
    if std_parts is None:
        return None
    var, epsilon = std_parts
    var_node = producer(var, "ReduceMean")
    if var_node is None or _trailing_mean_axis(var_node) != axis or not rw.has_one_use(var):
        return None
    square = _squares_of(rw, var_node.input(0), d)
    if square is None or not rw.only_used_by(d, [square, node]) or node.outputs[0].type != x.type:
        return None
    ones = np.ones(x.type.shape[axis:], x.type.dtype.numpy)
    scale = rw.constant(ones, f"{node.name}.scale")
    return rw.add("LayerNormalization", x, scale, None, attrs=LayerNormAttrs(axis, epsilon))


def _trailing_constant(value: Value, layernorm: Node) -> np.ndarray | None:
    """A constant that varies only along the normalized axes, trimmed to those axes."""
    data = constant_data(value)
    x = layernorm.input(0)
    axis = layernorm.attrs.axis % x.type.rank
    if data is None or data.ndim > x.type.rank:
        return None
    trailing = x.type.rank - axis
    leading = data.shape[: max(data.ndim - trailing, 0)]
    if any(d != 1 for d in leading):
        return None
    return data.reshape(data.shape[len(leading):])


@pattern("Mul", "Add")
def fold_affine_into_layernorm(rw: Rewriter, node: Node) -> Value | None:
    """LN(x, s, b) * c -> LN(x, s*c, b*c) and LN(x, s, b) + c -> LN(x, s, b+c)."""
    lhs, rhs = node.input(0), node.input(1)
    for value, other in ((lhs, rhs), (rhs, lhs)):
        layernorm = producer(value, "LayerNormalization")
        if layernorm is None or not rw.has_one_use(value) or node.outputs[0].type != value.type:
            continue
        c = _trailing_constant(other, layernorm)
        x, scale, bias = layernorm.input(0), layernorm.input(1), layernorm.inputs[2]
        s, b = constant_data(scale), constant_data(bias)
        if c is None or s is None or (bias is not None and b is None):
            continue
        dtype = s.dtype
        new_scale: Value
        if node.op == "Mul":
            new_scale = rw.constant((s.astype(np.float64) * c).astype(dtype), f"{layernorm.name}.scale")
            new_bias = None if b is None else rw.constant((b.astype(np.float64) * c).astype(dtype),
                                                          f"{layernorm.name}.bias")
        else:
            new_scale = scale
            total = c.astype(np.float64) if b is None else b.astype(np.float64) + c
            new_bias = rw.constant(total.astype(dtype), f"{layernorm.name}.bias")
        return rw.add("LayerNormalization", x, new_scale, new_bias, attrs=layernorm.attrs,
                      name=layernorm.name)
    return None


@register_pass
class RecognizeLayerNorm(RewritePass):
    """Preconditions: every intermediate of the expansion is read only inside it; both means
    reduce the same trailing axes [k, rank) with keepdims; eps is a one-element constant.
    Rules:
    1. d = x - ReduceMean(x); Div(d, Sqrt(ReduceMean(d^2) + eps)) (d^2 as Pow(d, 2) or
       Mul(d, d); the division possibly as Mul(d, Reciprocal(..)))
       -> LayerNormalization(x, ones, axis=k, epsilon=eps).
    2. Mul(LN(x, s, b), c) (either order), c a constant varying only along the normalized
       axes -> LN(x, s * c, b * c).
    3. Add(LN(x, s, b), c) (either order), same c -> LN(x, s, b + c) (b absent counts as 0).
    Rules 2 and 3 need constant s and b and only the Mul/Add reading the LN."""

    name = "recognize-layernorm"
    patterns = (recognize_layernorm, fold_affine_into_layernorm)
