"""Transformer ops of ONNX opset 23 and later: Attention (scaled dot-product attention with
masks, causal and sliding-window masking, KV cache, grouped-query heads and softcap),
RotaryEmbedding and LinearAttention (opset 27). Computed in float64, rounded once to the input type.

Attention operands: q, k, v as [B, heads, seq, head] (4-D) or [B, seq, heads * head] (3-D,
with q_num_heads/kv_num_heads); attn_mask (bool: True attends; float: added), past_key and
past_value ([B, kv_heads, past, head]) and nonpad_kv_seqlen ([B], valid keys per batch).
Results: y, present_key/present_value (past ++ new) and qk_matmul_output, whose stage
qk_matmul_output_mode picks: 0 (or 1) QK^T after softcap, 2 after adding the bias, 3 after
softmax.

None is a primitive: compiled backends lower them (lowering/attention.py) onto MatMul, Softmax,
Transpose and elementwise ops. Their 'oracle' trait keeps them whole on the interpreter, whose
NumPy references below are what the lowerings are checked against."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import require_float
from ember.types import DType, TensorType

# Not primitives, but the interpreter runs their references whole (see backends/interpreter).
ORACLE = frozenset({"oracle"})


@dataclass(frozen=True)
class AttentionAttrs:
    is_causal: bool = False
    q_num_heads: int = 0  # 3-D inputs only
    kv_num_heads: int = 0
    qk_matmul_output_mode: int = 0
    scale: float | None = None  # None: 1 / sqrt(head size)
    softcap: float = 0.0
    left_window_size: int = -1  # -1: unbounded
    right_window_size: int = -1

    def scale_for(self, head: int) -> float:
        """The scale of Q K^T: the attribute, or 1 / sqrt(head size) without one."""
        return self.scale if self.scale is not None else 1.0 / math.sqrt(head)


def attention_heads(attrs: AttentionAttrs, q: TensorType, k: TensorType, v: TensorType):
    """(q_heads, kv_heads, q_seq, kv_seq, head, v_head) of the inputs, or OpError."""
    if q.rank == 4:
        if k.rank != 4 or v.rank != 4:
            raise OpError(f"Attention Q, K and V must all be 3-D or all 4-D, got {q}, {k}, {v}")
        heads = q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3]
        v_heads, k_head = v.shape[1], k.shape[3]
    else:
        if q.rank != 3 or k.rank != 3 or v.rank != 3:
            raise OpError(f"Attention Q, K and V must all be 3-D or all 4-D, got {q}, {k}, {v}")
        qh, kvh = attrs.q_num_heads, attrs.kv_num_heads
        if qh < 1 or kvh < 1 or q.shape[2] % qh or k.shape[2] % kvh or v.shape[2] % kvh:
            raise OpError(f"Attention on 3-D inputs needs q_num_heads and kv_num_heads dividing the hidden sizes, "
                          f"got {qh} and {kvh} for {q}, {k}, {v}")
        heads = qh, kvh, q.shape[1], k.shape[1], q.shape[2] // qh, v.shape[2] // kvh
        v_heads, k_head = kvh, k.shape[2] // kvh
    # K and V must agree with Q on the batch, with each other on heads and keys, and K's head
    # size must be Q's (QK^T contracts over it).
    if not (k.shape[0] == v.shape[0] == q.shape[0] and v_heads == heads[1] and v.shape[-2 if q.rank == 4 else 1]
            == heads[3] and k_head == heads[4] and heads[1] >= 1):
        raise OpError(f"Attention Q, K and V do not fit together (batch, heads, keys, head size): {q}, {k}, {v}")
    return heads


def _attention_infer(attrs: AttentionAttrs, types):
    q, k, v, mask, past_k, past_v, nonpad = types
    require_float(q, "Attention")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise OpError(f"Attention Q, K and V must share an element type, got {q}, {k}, {v}")
    if mask is not None and mask.dtype not in (DType.BOOL, q.dtype):
        raise OpError(f"Attention attn_mask must be bool or {q.dtype} like Q, got {mask.dtype}")
    qh, kvh, q_seq, kv_seq, head, v_head = attention_heads(attrs, q, k, v)
    if qh % kvh:
        raise OpError(f"Attention q heads ({qh}) must be a multiple of kv heads ({kvh})")
    if (past_k is None) != (past_v is None):
        raise OpError("Attention past_key and past_value go together")
    batch = q.shape[0]
    past = 0 if past_k is None else past_k.shape[2]
    if past_k is not None and (past_k.shape != (batch, kvh, past, head) or past_v.shape != (batch, kvh, past, v_head)
                               or past_k.dtype != q.dtype or past_v.dtype != q.dtype):
        raise OpError(f"Attention past_key {past_k} / past_value {past_v} do not fit the inputs")
    if nonpad is not None and (nonpad.shape != (batch,) or past_k is not None):
        raise OpError(f"Attention nonpad_kv_seqlen {nonpad} must be [{batch}] and cannot go with a past cache")
    if attrs.qk_matmul_output_mode not in (0, 1, 2, 3):
        raise OpError(f"Attention qk_matmul_output_mode {attrs.qk_matmul_output_mode} is not 0 to 3")
    if attrs.scale is not None and not attrs.scale >= 0:
        raise OpError(f"Attention scale {attrs.scale}: ONNX scales Q and K by sqrt(scale) each, so a negative or "
                      "NaN scale makes every output NaN; give a scale >= 0")
    total = past + kv_seq
    if mask is not None:
        if mask.rank < 1 or mask.rank > 4 or mask.shape[-1] > total:
            raise OpError(f"Attention attn_mask {mask} must be 1-D to 4-D and at most {total} keys long")
        scores = (batch, qh, q_seq, total)
        padded = (*mask.shape[:-1], total)
        if any(m not in (1, s) for m, s in zip(reversed(padded), reversed(scores), strict=False)):
            raise OpError(f"Attention attn_mask {mask} does not broadcast to the scores {list(scores)}")
    y_shape = (batch, qh, q_seq, v_head) if q.rank == 4 else (batch, q_seq, qh * v_head)
    return (q.with_shape(y_shape), q.with_shape((batch, kvh, total, head)),
            q.with_shape((batch, kvh, total, v_head)), q.with_shape((batch, qh, q_seq, total)))


def heads_first(x: np.ndarray, heads: int) -> np.ndarray:
    """[B, S, heads * d] -> [B, heads, S, d]; a 4-D input is already so."""
    if x.ndim == 4:
        return x
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def frontier_bias(q_seq: int, kv_seq: int, offset, left: int, right: int, causal: bool) -> np.ndarray:
    """Additive bias (0 or -inf) of the causal and sliding-window constraints for a query
    at position offset + i against key j; offset is a scalar or one value per batch."""
    i = np.arange(q_seq).reshape(q_seq, 1)
    j = np.arange(kv_seq).reshape(1, kv_seq)
    per_batch = np.ndim(offset) > 0
    pos = i + (np.reshape(offset, (-1, 1, 1)) if per_batch else int(offset))
    allowed = np.ones(np.broadcast_shapes(pos.shape, j.shape), dtype=bool)
    if causal:
        allowed &= j <= pos
    if left >= 0:
        allowed &= pos - j <= left
    if right >= 0:
        allowed &= j - pos <= right
    bias = np.where(allowed, 0.0, -np.inf)
    return bias.reshape(bias.shape[0], 1, q_seq, kv_seq) if per_batch else bias


def softmax_rows(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis. A row of -inf scores is NaN (0/0), as in ONNX Runtime and
    the lowering: only rows the masks remove entirely give 0, which the caller sets."""
    with np.errstate(invalid="ignore"):
        e = np.exp(x - np.max(x, axis=-1, keepdims=True))
        return e / np.sum(e, axis=-1, keepdims=True)


def _work_type(dtype: np.dtype) -> tuple[type, Callable[[np.ndarray], np.ndarray]]:
    """The type an attention op stores its intermediate values in (float64 for float64, else
    float32, as ONNX's reference and the lowerings compute), and a function rounding float64
    values through it: the oracle sums in float64 but rounds what a float32 computation
    stores, so it overflows where that computation overflows."""
    work = np.float64 if dtype == np.float64 else np.float32

    def stored(a: np.ndarray) -> np.ndarray:
        return a.astype(work).astype(np.float64)

    return work, stored


def _attention(attrs: AttentionAttrs, arrays):
    q, k, v, mask, past_k, past_v, nonpad = arrays
    dtype = q.dtype
    qh, kvh, q_seq, kv_seq, head, _ = attention_heads(attrs, TensorType.of(q), TensorType.of(k), TensorType.of(v))
    q4, k4, v4 = (heads_first(a.astype(np.float64), h) for a, h in ((q, qh), (k, kvh), (v, kvh)))
    if past_k is not None:
        k4 = np.concatenate([past_k.astype(np.float64), k4], axis=2)
        v4 = np.concatenate([past_v.astype(np.float64), v4], axis=2)
    present_k, present_v = k4, v4
    total = k4.shape[2]
    bias = np.zeros((q_seq, total))
    if mask is not None:
        m = np.where(mask, 0.0, -np.inf) if mask.dtype == np.bool_ else mask.astype(np.float64)
        pad = total - m.shape[-1]
        if pad > 0:  # a short mask leaves the remaining keys masked
            m = np.pad(m, [(0, 0)] * (m.ndim - 1) + [(0, pad)], constant_values=-np.inf)
        bias = bias + m
    if past_k is None and nonpad is not None:
        offset = nonpad.astype(np.int64).reshape(-1) - q_seq
    else:
        offset = 0 if past_k is None else past_k.shape[2]
    if attrs.is_causal or attrs.left_window_size >= 0 or attrs.right_window_size >= 0:
        bias = bias + frontier_bias(q_seq, total, offset, attrs.left_window_size, attrs.right_window_size,
                                     attrs.is_causal)
    if nonpad is not None:
        valid = np.arange(total) < nonpad.astype(np.int64).reshape(-1, 1)
        bias = bias + np.where(valid, 0.0, -np.inf).reshape(-1, 1, 1, total)
    if qh != kvh:  # grouped-query attention: each kv head serves qh / kvh query heads
        k4 = np.repeat(k4, qh // kvh, axis=1)
        v4 = np.repeat(v4, qh // kvh, axis=1)
    # As ONNX defines it (and its reference computes it), Q and K are each scaled by
    # sqrt(scale), in the element type, before the product. Sums run in float64, but the values
    # a float32 computation stores (scaled Q and K, the scores) are rounded to float32 as the
    # lowering stores them, so they overflow where it overflows (a huge scale: inf scores).
    work, stored = _work_type(dtype)
    root = float(work(math.sqrt(attrs.scale_for(head))))
    with np.errstate(over="ignore", invalid="ignore"):
        qk = stored(stored(q4 * root) @ np.swapaxes(stored(k4 * root), -1, -2))
        if attrs.softcap > 0:
            qk = stored(attrs.softcap * np.tanh(qk / attrs.softcap))
        with_bias = stored(qk + bias)
    probs = softmax_rows(with_bias)
    masked_rows = np.isneginf(np.max(np.broadcast_to(bias, with_bias.shape), axis=-1, keepdims=True))
    probs = np.where(masked_rows, 0.0, probs)  # a row with no attendable key gives 0
    y = probs @ v4
    if q.ndim == 3:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], q_seq, -1)
    qk_out = {2: with_bias, 3: probs}.get(attrs.qk_matmul_output_mode, qk)
    return tuple(np.asarray(r).astype(dtype) for r in (y, present_k, present_v,
                                                       np.broadcast_to(qk_out, probs.shape)))


define_op(OpDef("Attention", ("q", "k", "v", "attn_mask?", "past_key?", "past_value?", "nonpad_kv_seqlen?"),
                ("y", "present_key", "present_value", "qk_matmul_output"), _attention_infer, _attention,
                attrs=AttentionAttrs, primitive=False, traits=ORACLE))


@dataclass(frozen=True)
class RotaryAttrs:
    """interleaved: rotate pairs (x0, x1), (x2, x3)... instead of the two halves; only the
    first rotary_embedding_dim (0: all) features of each head rotate."""

    interleaved: bool = False
    num_heads: int = 0
    rotary_embedding_dim: int = 0


def _rotary_infer(attrs: RotaryAttrs, types):
    x, cos, sin, positions = types
    require_float(x, "RotaryEmbedding")
    if x.rank == 4:
        head = x.shape[3]
    elif x.rank == 3 and attrs.num_heads > 0 and x.shape[2] % attrs.num_heads == 0:
        head = x.shape[2] // attrs.num_heads
    else:
        raise OpError(f"RotaryEmbedding needs a 4-D input, or a 3-D one with num_heads, got {x}")
    dim = attrs.rotary_embedding_dim or head
    if dim > head or dim % 2 or cos.shape[-1] != dim // 2 or sin.shape != cos.shape:
        raise OpError(f"RotaryEmbedding caches {cos} / {sin} do not fit rotary dim {dim} of heads of {head}")
    if positions is not None and positions.dtype is not DType.INT64:
        raise OpError(f"RotaryEmbedding position_ids must be i64, got {positions.dtype}")
    batch, seq = x.shape[0], x.shape[2] if x.rank == 4 else x.shape[1]
    if positions is not None and positions.shape != (batch, seq):
        raise OpError(f"RotaryEmbedding position_ids must be [batch, sequence] = [{batch}, {seq}], got {positions}")
    if positions is not None and cos.rank != 2:
        raise OpError(f"RotaryEmbedding caches indexed by position_ids must be [positions, {dim // 2}], got {cos}")
    if positions is None and cos.shape != (batch, seq, dim // 2):
        raise OpError(f"RotaryEmbedding caches without position_ids must be [batch, sequence, rotary dim / 2] = "
                      f"[{batch}, {seq}, {dim // 2}], got {cos}")
    return (x,)


def _rotary(attrs: RotaryAttrs, arrays):
    x, cos, sin, positions = arrays
    xf = x.astype(np.float64)
    if x.ndim == 4:  # [B, heads, seq, head] -> [B, seq, heads, head]
        xs = xf.transpose(0, 2, 1, 3)
    else:
        b, s, hidden = x.shape
        xs = xf.reshape(b, s, attrs.num_heads, hidden // attrs.num_heads)
    dim = attrs.rotary_embedding_dim or xs.shape[3]
    if positions is not None:
        n = cos.shape[0]
        if positions.size and (positions.min() < -n or positions.max() >= n):
            # As the lowering's Gather of the cache rows: a run-time input error, not an IndexError.
            raise OpError(f"RotaryEmbedding position_ids {int(positions.min())}..{int(positions.max())} are "
                          f"out of range for a cos/sin cache of {n} positions")
        cos, sin = cos[positions], sin[positions]
    cos = np.expand_dims(cos.astype(np.float64), 2)
    sin = np.expand_dims(sin.astype(np.float64), 2)
    rot, rest = xs[..., :dim], xs[..., dim:]
    x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if attrs.interleaved else np.split(rot, 2, axis=-1)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if attrs.interleaved:
        rotated = np.stack([real, imag], axis=-1).reshape(rot.shape)
    else:
        rotated = np.concatenate([real, imag], axis=-1)
    out = np.concatenate([rotated, rest], axis=-1)
    out = out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(x.shape)
    return (out.astype(x.dtype),)


define_op(OpDef("RotaryEmbedding", ("x", "cos_cache", "sin_cache", "position_ids?"), ("y",), _rotary_infer,
                _rotary, attrs=RotaryAttrs, primitive=False, traits=ORACLE))

UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


@dataclass(frozen=True)
class LinearAttentionAttrs:
    """A recurrent linear attention over time with state S [B, kv_heads, d_k, d_v]: per step,
    'gated' rules decay S by exp(decay_t), 'delta' rules write beta_t * (v_t - S^T k_t)
    instead of v_t, S += k_t v_t^T, and the output reads scale * q_t S (query heads share
    kv heads in groups)."""

    q_num_heads: int
    kv_num_heads: int
    update_rule: str = "gated_delta"
    scale: float | None = None  # None: 1 / sqrt(d_k)

    def scale_for(self, d_k: int) -> float:
        """The scale of q S: the attribute, or 1 / sqrt(d_k) without one (or with 0)."""
        return self.scale if self.scale else 1.0 / math.sqrt(d_k)

    @property
    def gated(self) -> bool:
        return self.update_rule in ("gated", "gated_delta")

    @property
    def delta(self) -> bool:
        return self.update_rule in ("delta", "gated_delta")


def _linear_attention_infer(attrs: LinearAttentionAttrs, types):
    q, k, v, state, decay, beta = types
    require_float(q, "LinearAttention")
    qh, kvh = attrs.q_num_heads, attrs.kv_num_heads
    if attrs.update_rule not in UPDATE_RULES:
        raise OpError(f"LinearAttention update_rule '{attrs.update_rule}' is not one of {', '.join(UPDATE_RULES)}")
    if q.rank != 3 or k.rank != 3 or v.rank != 3 or qh < 1 or kvh < 1 or qh % kvh \
            or q.shape[2] % qh or k.shape[2] % kvh or v.shape[2] % kvh:
        raise OpError(f"LinearAttention needs [B, T, heads * d] q, k, v fitting {qh} / {kvh} heads, "
                      f"got {q}, {k}, {v}")
    if (decay is None) == attrs.gated or (beta is None) == attrs.delta:
        raise OpError(f"LinearAttention '{attrs.update_rule}' takes decay only when gated and beta only for delta")
    b, t = q.shape[:2]
    d_k, d_v = q.shape[2] // qh, v.shape[2] // kvh
    if k.shape[:2] != (b, t) or v.shape[:2] != (b, t) or k.shape[2] // kvh != d_k:
        raise OpError(f"LinearAttention q, k and v must share batch, time and key size, got {q}, {k}, {v}")
    if decay is not None and decay.shape not in ((b, t, kvh), (b, t, kvh * d_k)):
        raise OpError(f"LinearAttention decay {decay} must be [{b}, {t}, {kvh}] or [{b}, {t}, {kvh * d_k}]")
    if beta is not None and beta.shape not in ((b, t, kvh), (b, t, 1)):
        raise OpError(f"LinearAttention beta {beta} must be [{b}, {t}, {kvh}] or [{b}, {t}, 1]")
    state_shape = (b, kvh, d_k, d_v)
    if state is not None and state.shape != state_shape:
        raise OpError(f"LinearAttention past_state {state} must have shape {list(state_shape)}")
    return (q.with_shape((b, t, qh * d_v)), (state or q).with_shape(state_shape))


def _linear_attention(attrs: LinearAttentionAttrs, arrays):
    q, k, v, state, decay, beta = arrays
    qh, kvh = attrs.q_num_heads, attrs.kv_num_heads
    q4, k4, v4 = (heads_first(a.astype(np.float64), h) for a, h in ((q, qh), (k, kvh), (v, kvh)))
    b, _, t, d_k = q4.shape
    d_v = v4.shape[3]
    s = np.zeros((b, kvh, d_k, d_v)) if state is None else state.astype(np.float64)
    if decay is not None:  # per head [B, T, H] or per key feature [B, T, H * d_k]
        g = decay.astype(np.float64).reshape(b, t, kvh, -1).transpose(0, 2, 1, 3)
    if beta is not None:  # [B, T, H] or [B, T, 1]
        w = beta.astype(np.float64).reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3)
    scale = attrs.scale_for(d_k)
    out = np.zeros((b, qh, t, d_v))
    # The state and the corrected values are rounded where a float32 computation stores them
    # (a state that overflows float32 is inf there, and inf - inf later NaN, as in ONNX's
    # reference and ONNX Runtime).
    _, stored = _work_type(q.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(t):
            k_t, v_t = k4[:, :, i], v4[:, :, i]
            if attrs.gated:
                s = stored(s * np.exp(g[:, :, i])[..., None])
            if attrs.delta:
                v_t = stored(w[:, :, i] * stored(v_t - stored(np.einsum("bhdm,bhd->bhm", s, k_t))))
            s = stored(s + stored(k_t[..., :, None] * v_t[..., None, :]))
            read = np.repeat(s, qh // kvh, axis=1)
            out[:, :, i] = scale * np.einsum("bhd,bhdm->bhm", q4[:, :, i], read)
    y = out.transpose(0, 2, 1, 3).reshape(b, t, qh * d_v)
    return (y.astype(q.dtype), s.astype(q.dtype if state is None else state.dtype))


define_op(OpDef("LinearAttention", ("query", "key", "value", "past_state?", "decay?", "beta?"),
                ("output", "present_state"), _linear_attention_infer, _linear_attention, attrs=LinearAttentionAttrs,
                primitive=False, traits=ORACLE))

__all__ = ["ORACLE", "AttentionAttrs", "LinearAttentionAttrs", "RotaryAttrs", "attention_heads", "frontier_bias"]
