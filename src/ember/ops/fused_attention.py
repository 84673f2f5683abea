"""FusedAttention: the scaled dot-product attention of a transformer layer, as the graph
optimizer recognizes it (transforms/fuse_attention.py) from the MatMul -> scale -> mask Add ->
Softmax -> MatMul chain with its head-splitting reshapes and transposes.

    y[b, i, h*dv:(h+1)*dv] = softmax_j(scale * q_h[i] . k_h[j] + mask[b, h, i, j]) @ v_h

with q [B, S, heads * d], k [B, T, heads * d], v [B, T, heads * dv] (each head a slice of the
last axis, as the projections produce them) and an optional additive float mask that
broadcasts to the scores [B, heads, S, T]. A row whose scores are all -inf is NaN (0/0), as the
Softmax it replaces gives. Not a primitive: backends without a kernel get the chain back
(lowering/fused.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.ops.attention import heads_first, softmax_rows
from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import require_float


@dataclass(frozen=True)
class FusedAttentionAttrs:
    heads: int = 1
    scale: float = 1.0


def mask_broadcasts(mask: tuple[int, ...], scores: tuple[int, ...]) -> bool:
    """Whether a mask of shape `mask` (rank 1 to 4) broadcasts to `scores` [B, heads, S, T]."""
    return 1 <= len(mask) <= 4 and all(m in (1, s) for m, s in zip(reversed(mask), reversed(scores), strict=False))


def _infer(attrs: FusedAttentionAttrs, types):
    q, k, v, mask = types
    require_float(q, "FusedAttention")
    if k.dtype != q.dtype or v.dtype != q.dtype or (mask is not None and mask.dtype != q.dtype):
        raise OpError(f"FusedAttention operands must share Q's element type, got {q}, {k}, {v}, {mask}")
    h = attrs.heads
    if (q.rank != 3 or k.rank != 3 or v.rank != 3 or h < 1 or q.shape[2] % h or k.shape[2] != q.shape[2]
            or v.shape[2] % h or k.shape[0] != q.shape[0] or v.shape[:2] != k.shape[:2]):
        raise OpError(f"FusedAttention needs q [B, S, {h} * d], k [B, T, {h} * d] and v [B, T, {h} * dv], "
                      f"got {q}, {k}, {v}")
    scores = (q.shape[0], h, q.shape[1], k.shape[1])
    if mask is not None and not mask_broadcasts(mask.shape, scores):
        raise OpError(f"FusedAttention mask {mask} does not broadcast to the scores {list(scores)}")
    return (q.with_shape((q.shape[0], q.shape[1], v.shape[2])),)


def _reference(attrs: FusedAttentionAttrs, arrays):
    q, k, v, mask = arrays
    h = attrs.heads
    q4, k4, v4 = (heads_first(a.astype(np.float64), h) for a in (q, k, v))
    scores = (q4 @ np.swapaxes(k4, -1, -2)) * attrs.scale
    if mask is not None:
        scores = scores + mask.astype(np.float64)
    y = softmax_rows(scores) @ v4
    return (y.transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], -1).astype(q.dtype),)


define_op(OpDef("FusedAttention", ("q", "k", "v", "mask?"), ("y",), _infer, _reference, attrs=FusedAttentionAttrs,
                primitive=False))
