"""Scaled dot-product attention as one FusedAttention node (ops/fused_attention.py): the chain
a transformer exporter writes per layer,

    q4 = Transpose(Reshape(q, [B, S, h, d]), [0, 2, 1, 3])     (and v4 alike)
    kT = Transpose(Reshape(k, [B, T, h, d]), [0, 2, 3, 1])
    p  = Softmax(MatMul(q4, kT) [/ c or * c] [+ mask], axis=-1)
    y  = Reshape(Transpose(MatMul(p, v4), [0, 2, 1, 3]), [B, S, h * dv])

so that a kernel reads each head straight out of the projections and writes it straight into
y: no transposed copies, and no [B, h, S, T] scores tensor in memory. Only the cpu backend's
pipeline runs it (backends/cpu/backend.py), which has the kernel."""
from __future__ import annotations

from ember.graph import Constant, Node, Value
from ember.ops.fused_attention import FusedAttentionAttrs, mask_broadcasts
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import producer, scalar_value

_HEADS_FIRST = (0, 2, 1, 3)
_KEYS_LAST = (0, 2, 3, 1)


def _heads_of(rw: Rewriter, value: Value, perm: tuple[int, ...]) -> tuple[Value, int] | None:
    """(x, heads) for value = Transpose(Reshape(x [B, S, h * d] -> [B, S, h, d]), perm), both
    read only on this path."""
    t = producer(value, "Transpose")
    if t is None or tuple(t.attrs.perm) != perm or not rw.has_one_use(value):
        return None
    split = producer(t.input(0), "Reshape")
    if split is None or not rw.has_one_use(t.input(0)):
        return None
    x = split.input(0)
    b, s, h, d = split.outputs[0].type.shape
    if x.type.rank != 3 or x.type.shape != (b, s, h * d):
        return None
    return x, h


def _scaled(rw: Rewriter, value: Value) -> tuple[Value, float] | None:
    """(scores, scale) for value = scores / c or scores * c (c a one-element constant), or
    (value, 1.0) when neither."""
    node = producer(value, "Div", "Mul")
    if node is None or not rw.has_one_use(value):
        return value, 1.0
    orders = [(node.input(0), node.input(1))]
    if node.op == "Mul":
        orders.append((node.input(1), node.input(0)))
    for a, b in orders:
        c = scalar_value(b) if isinstance(b, Constant) else None
        if c is not None and c != 0.0 and a.type == value.type:
            return a, (1.0 / c if node.op == "Div" else c)
    return None


def _product(rw: Rewriter, value: Value) -> tuple[Node, float] | None:
    """(the Q.K^T MatMul, scale) for value = MatMul(..) [/ c or * c], read only on this path."""
    found = _scaled(rw, value)
    if found is None:
        return None
    scores, scale = found
    qk = producer(scores, "MatMul")
    if qk is None or not rw.has_one_use(scores):
        return None
    return qk, scale


@pattern("Reshape")
def fuse_attention(rw: Rewriter, node: Node) -> Value | None:
    merged = producer(node.input(0), "Transpose")
    if merged is None or tuple(merged.attrs.perm) != _HEADS_FIRST or not rw.has_one_use(node.input(0)):
        return None
    pv = producer(merged.input(0), "MatMul")
    if pv is None or not rw.has_one_use(merged.input(0)):
        return None
    softmax = producer(pv.input(0), "Softmax")
    if (softmax is None or softmax.input(0).type.rank != 4 or softmax.attrs.axis % 4 != 3
            or not rw.has_one_use(pv.input(0))):
        return None
    scores = softmax.input(0)
    candidates: list[tuple[Value, Value | None]] = [(scores, None)]
    add = producer(scores, "Add")
    if add is not None and rw.has_one_use(scores):
        candidates = [(add.input(0), add.input(1)), (add.input(1), add.input(0))]
    for unmasked, mask in candidates:
        found = _product(rw, unmasked)
        fits = mask is None or (mask.type.dtype == scores.type.dtype and unmasked.type == scores.type)
        if found is not None and fits:
            qk, scale = found
            break
    else:
        return None
    parts = [_heads_of(rw, qk.input(0), _HEADS_FIRST), _heads_of(rw, qk.input(1), _KEYS_LAST),
             _heads_of(rw, pv.input(1), _HEADS_FIRST)]
    if any(p is None for p in parts):
        return None
    (q, h), (k, hk), (v, hv) = parts  # type: ignore[misc]  # None ruled out above
    y = node.outputs[0]
    if not h == hk == hv or y.type.rank != 3 or y.type.shape != (q.type.shape[0], q.type.shape[1], v.type.shape[2]):
        return None
    if mask is not None and not mask_broadcasts(mask.type.shape, qk.outputs[0].type.shape):
        return None
    (out,) = rw.add_node("FusedAttention", [q, k, v, mask], FusedAttentionAttrs(h, scale), name=node.name)
    return out


@register_pass
class FuseAttention(RewritePass):
    """Preconditions: recognize-softmax and optimize-transposes have run (the chain's Softmax
    and its transposes are in the forms above).
    Rules:
    1. The chain in the module docstring, every intermediate read only by the next step, the
       scale a one-element constant (Div: its reciprocal), the mask an Add operand that
       broadcasts to the scores, q, k and v split into the same number of heads -> one
       FusedAttention(q, k, v, mask) {heads, scale}."""

    name = "fuse-attention"
    patterns = (fuse_attention,)
