"""Transpose merging, cancellation and sinking, and transposes that move no data."""
from __future__ import annotations

import numpy as np

from ember.graph import Node, Value
from ember.ops.tensor import ReshapeAttrs, TransposeAttrs
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import broadcasts_into, constant_data, producer


def _compose(inner: tuple[int, ...], outer: tuple[int, ...]) -> tuple[int, ...]:
    """Transpose(Transpose(x, inner), outer) == Transpose(x, result)."""
    return tuple(inner[axis] for axis in outer)


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return tuple(inverse)


def _is_identity(perm: tuple[int, ...]) -> bool:
    return perm == tuple(range(len(perm)))


@pattern("Transpose")
def merge_transposes(rw: Rewriter, node: Node) -> Value | None:
    inner = producer(node.inputs[0], "Transpose")
    if inner is None:
        return None
    perm = _compose(tuple(inner.attrs.perm), tuple(node.attrs.perm))
    x = inner.inputs[0]
    if _is_identity(perm):
        return x
    return rw.add("Transpose", x, attrs=TransposeAttrs(perm))


@pattern("Transpose")
def transpose_to_reshape(rw: Rewriter, node: Node) -> Value | None:
    x = node.input(0)
    perm = tuple(node.attrs.perm)
    moved = [axis for axis in perm if x.type.shape[axis] != 1]
    if moved != sorted(moved):
        return None
    # A transpose feeding another transpose is better merged with it than rewritten here.
    if any(user.op == "Transpose" for user, _ in rw.users(node.outputs[0])):
        return None
    return rw.add("Reshape", x, attrs=ReshapeAttrs(node.outputs[0].type.shape))


def _sinkable_transpose(rw: Rewriter, value: Value, root: Node) -> Node | None:
    """The Transpose producing `value`, if only `root` reads it (sinking a transpose with other
    readers would duplicate it)."""
    node = producer(value, "Transpose")
    if node is None or not rw.only_used_by(value, [root]):
        return None
    return node


def _is_elementwise(node: Node, arity: int) -> bool:
    return "elementwise" in node.opdef.traits and len(node.inputs) == arity


@pattern()
def sink_through_unary(rw: Rewriter, node: Node) -> Value | None:
    if not _is_elementwise(node, 1):
        return None
    transpose = _sinkable_transpose(rw, node.input(0), node)
    if transpose is None:
        return None
    (y,) = rw.add_node(node.op, [transpose.inputs[0]], node.attrs)
    return rw.add("Transpose", y, attrs=transpose.attrs)


def _untransposed_operand(rw: Rewriter, value: Value, root: Node, perm: tuple[int, ...]) -> Value | None:
    """The operand to use once the transpose `perm` moves below `root`: the input of an equal
    transpose, or a constant transposed back at compile time."""
    transpose = _sinkable_transpose(rw, value, root)
    if transpose is not None:
        return transpose.inputs[0] if tuple(transpose.attrs.perm) == perm else None
    data = constant_data(value)
    if data is None or data.ndim > len(perm):
        return None
    padded = data.reshape((1,) * (len(perm) - data.ndim) + data.shape)
    return rw.constant(np.transpose(padded, _inverse(perm)), f"{value.name}.t")


@pattern()
def sink_through_binary(rw: Rewriter, node: Node) -> Value | None:
    """op(T(x), T(y)) -> T(op(x, y)) and op(T(x), c) -> T(op(x, T^-1(c))) for elementwise op."""
    if not _is_elementwise(node, 2):
        return None
    a, b = node.input(0), node.input(1)
    result = node.outputs[0].type
    for first, second in ((a, b), (b, a)):
        transpose = _sinkable_transpose(rw, first, node)
        if transpose is None:
            continue
        perm = tuple(transpose.attrs.perm)
        x = transpose.input(0)
        # Broadcasting must not grow the result, or the operands would need their own transposes.
        if first.type.shape != result.shape or not broadcasts_into(second.type.shape, result.shape):
            return None
        other = _untransposed_operand(rw, second, node, perm)
        if other is None:
            return None
        operands = [x, other] if first is a else [other, x]
        (y,) = rw.add_node(node.op, operands, node.attrs)
        if y.type.shape != x.type.shape:
            return None
        return rw.add("Transpose", y, attrs=transpose.attrs)
    return None


@register_pass
class OptimizeTransposes(RewritePass):
    """Preconditions: none.
    Rules:
    1. Transpose(Transpose(x, p), q) -> Transpose(x, p∘q), or x when p∘q is the identity.
    2. A Transpose that keeps the order of the axes larger than 1 moves no data: it becomes a
       Reshape (unless it feeds another Transpose, which rule 1 merges instead).
    3. u(Transpose(x, p)) -> Transpose(u(x), p) for elementwise unary u, when only u reads
       the transpose, so transposes sink toward each other and cancel by rule 1.
    4. b(Transpose(x, p), Transpose(y, p)) -> Transpose(b(x, y), p) and
       b(Transpose(x, p), c) -> Transpose(b(x, c'), p) with c' = c transposed back at compile
       time, for elementwise binary b whose broadcasting grows nothing.
    Sinking only moves transposes down, so the rules terminate."""

    name = "optimize-transposes"
    patterns = (merge_transposes, transpose_to_reshape, sink_through_unary, sink_through_binary)
