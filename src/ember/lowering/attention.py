"""Lowering of the attention family (Attention, RotaryEmbedding, LinearAttention) onto MatMul,
Softmax, Transpose, Reshape, Slice, Concat and elementwise primitives, mirroring the NumPy
references of ops/attention.py step by step. Half-precision inputs compute in float32 and
round once at the end, as the references (float64) do."""
from __future__ import annotations

import math

import numpy as np

from ember.graph import Constant, Graph, Node, Value
from ember.lowering.einsum import cast, compute_dtype, reshape, slice_axis, transpose
from ember.lowering.engine import lowering, scalar
from ember.ops.attention import AttentionAttrs, LinearAttentionAttrs, RotaryAttrs, attention_heads, frontier_bias
from ember.ops.normalization import SoftmaxAttrs
from ember.ops.reduce import ReduceAttrs
from ember.ops.tensor import AxisAttrs
from ember.types import DType, TensorType


def _heads_first(graph: Graph, x: Value, heads: int, name: str) -> Value:
    """[B, S, heads * d] -> [B, heads, S, d]; a 4-D input is already so."""
    if x.type.rank == 4:
        return x
    b, s, hidden = x.type.shape
    split = reshape(graph, x, (b, s, heads, hidden // heads), name)
    return transpose(graph, split, (0, 2, 1, 3), name)


def _concat(graph: Graph, parts: list[Value], axis: int, name: str) -> Value:
    return parts[0] if len(parts) == 1 else graph.add("Concat", *parts, attrs=AxisAttrs(axis), name=name)


# Attention --------------------------------------------------------------------------------


def _nonpad_allowed(graph: Graph, attrs: AttentionAttrs, nonpad: Value, q_seq: int, total: int,
                    name: str) -> Value:
    """[B, 1, q_seq, total] bool: keys j < nonpad[b] of batch b, and the causal and window
    constraints for queries at positions nonpad[b] - q_seq + i (known at run time only).
    With d = j - i + q_seq: causal is d <= n, the left window n <= d + left, the right
    window d - right <= n."""
    n = reshape(graph, cast(graph, nonpad, DType.INT64, f"{name}.nonpad"), (nonpad.type.shape[0], 1, 1, 1),
                f"{name}.nonpad")
    j = np.arange(total).reshape(1, -1)
    d = (j - np.arange(q_seq).reshape(-1, 1) + q_seq).reshape(1, 1, q_seq, total)

    def const(data: np.ndarray) -> Value:
        return graph.add_constant(np.asarray(data, np.int64), f"{name}.positions")

    allowed = graph.add("Less", const(j.reshape(1, 1, 1, total)), n, name=f"{name}.valid")
    conditions = []
    if attrs.is_causal:
        conditions.append(graph.add("LessOrEqual", const(d), n, name=f"{name}.causal"))
    if attrs.left_window_size >= 0:
        conditions.append(graph.add("LessOrEqual", n, const(d + attrs.left_window_size), name=f"{name}.left"))
    if attrs.right_window_size >= 0:
        conditions.append(graph.add("LessOrEqual", const(d - attrs.right_window_size), n, name=f"{name}.right"))
    for condition in conditions:
        allowed = graph.add("And", allowed, condition, name=f"{name}.allowed")
    return allowed


def _additive(graph: Graph, allowed: Value, dtype: DType, name: str) -> Value:
    """0 where allowed, -inf elsewhere."""
    return graph.add("Where", allowed, scalar(graph, 0.0, dtype, "zero"), scalar(graph, -np.inf, dtype, "neg_inf"),
                     name=name)


def _padded_mask(graph: Graph, mask: Value, total: int, dtype: DType, name: str) -> Value:
    """attn_mask over all `total` keys (a shorter mask leaves the rest masked: False, or
    -inf), a float one in the compute type."""
    if mask.type.dtype is not DType.BOOL:
        mask = cast(graph, mask, dtype, f"{name}.mask")
    pad = total - mask.type.shape[-1]
    if pad <= 0:
        return mask
    masked = False if mask.type.dtype is DType.BOOL else -np.inf
    fill = np.full(mask.type.shape[:-1] + (pad,), masked, mask.type.dtype.numpy)
    return _concat(graph, [mask, graph.add_constant(fill, f"{name}.mask_pad")], -1, f"{name}.mask")


def _static_bias(mask: np.ndarray, total: int) -> np.ndarray:
    bias = np.where(mask, 0.0, -np.inf) if mask.dtype == np.bool_ else mask.astype(np.float64)
    return np.pad(bias, [(0, 0)] * (bias.ndim - 1) + [(0, total - bias.shape[-1])], constant_values=-np.inf)


def _mask_scores(graph: Graph, node: Node, scores: Value, q_seq: int, total: int) -> tuple[Value, Value | None]:
    """The scores with the mask, the causal and window frontier and the key padding applied
    (each added onto the scores as a 0 / -inf bias, as ONNX defines them, so the steps stay one
    elementwise chain), and a bool
    'every key of this row is masked' broadcastable to the scores, None when no row can be."""
    attrs: AttentionAttrs = node.attrs
    mask, past_k, nonpad = node.inputs[3], node.inputs[4], node.inputs[6]
    name = node.name
    dtype = scores.type.dtype
    neg_inf = scalar(graph, -np.inf, dtype, "neg_inf")
    terms: list[Value] = []  # the same constraints as additive biases, to find masked rows
    static = np.zeros((q_seq, total))  # what is known now, likewise
    runtime = False
    x = scores
    if mask is not None:
        padded = _padded_mask(graph, mask, total, dtype, name)
        if padded.type.dtype is DType.BOOL:
            # Added as a bias, as ONNX defines it (not selected): a NaN score stays NaN
            bias = _additive(graph, padded, dtype, f"{name}.mask_bias")
            x = graph.add("Add", x, bias, name=f"{name}.masked")
            terms.append(bias)
        else:
            x = graph.add("Add", x, padded, name=f"{name}.masked")
            terms.append(padded)
        if isinstance(mask, Constant):
            static = static + _static_bias(mask.data, total)
        else:
            runtime = True
    if nonpad is not None:  # query positions known at run time only
        allowed = _nonpad_allowed(graph, attrs, nonpad, q_seq, total, name)
        bias = _additive(graph, allowed, dtype, f"{name}.pad_bias")
        x = graph.add("Add", x, bias, name=f"{name}.padded")
        terms.append(bias)
        runtime = True
    elif attrs.is_causal or attrs.left_window_size >= 0 or attrs.right_window_size >= 0:
        offset = 0 if past_k is None else past_k.type.shape[2]  # queries follow the cached keys
        frontier = frontier_bias(q_seq, total, offset, attrs.left_window_size, attrs.right_window_size,
                                 attrs.is_causal)
        static = static + frontier
        const = graph.add_constant(frontier.astype(dtype.numpy), f"{name}.frontier")
        x = graph.add("Add", x, const, name=f"{name}.frontier")
        terms.append(const)
    if not runtime:
        rows = np.isneginf(np.max(static, axis=-1, keepdims=True))
        return x, (graph.add_constant(rows, f"{name}.masked_rows") if rows.any() else None)
    bias = terms[0]
    for term in terms[1:]:
        bias = graph.add("Add", bias, term, name=f"{name}.bias")
    peak = graph.add("ReduceMax", bias, attrs=ReduceAttrs((bias.type.rank - 1,), True), name=f"{name}.peak")
    return x, graph.add("Equal", peak, neg_inf, name=f"{name}.masked_rows")


@lowering("Attention")
def lower_attention(graph: Graph, node: Node) -> list[Value]:
    """softmax((sqrt(scale) Q)(sqrt(scale) K)^T (softcapped) + bias) V. Query heads sharing a kv head (GQA) are
    stacked along the query rows: [B, q_heads, S, d] is [B, kv_heads, (q_heads / kv_heads) S,
    d] without a copy, so K and V are never repeated. A row whose keys are all masked gives
    zeros, as in the reference (the softmax of an all -inf row is NaN, replaced by a Where)."""
    attrs: AttentionAttrs = node.attrs
    q, k, v = node.input(0), node.input(1), node.input(2)
    past_k, past_v = node.inputs[4], node.inputs[5]
    name = node.name
    q_heads, kv_heads, q_seq, _, head, v_head = attention_heads(attrs, q.type, k.type, v.type)
    batch = q.type.shape[0]
    dtype = q.type.dtype
    work = compute_dtype(dtype)

    k4 = _heads_first(graph, k, kv_heads, f"{name}.k")
    v4 = _heads_first(graph, v, kv_heads, f"{name}.v")
    if past_k is not None and past_v is not None:
        k4 = _concat(graph, [cast(graph, past_k, dtype, f"{name}.past"), k4], 2, f"{name}.present_key")
        v4 = _concat(graph, [cast(graph, past_v, dtype, f"{name}.past"), v4], 2, f"{name}.present_value")
    present_k, present_v = k4, v4
    total = k4.type.shape[2]
    group = q_heads // kv_heads
    full = (batch, q_heads, q_seq, total)

    # Q and K each scaled by sqrt(scale) before the product, as ONNX defines it: the scores
    # overflow (a huge scale) where the reference's do (ops/attention.py, the oracle, agrees).
    root = scalar(graph, math.sqrt(attrs.scale_for(head)), work, "sqrt_scale")
    q4 = cast(graph, _heads_first(graph, q, q_heads, f"{name}.q"), work, f"{name}.q")
    q4 = graph.add("Mul", q4, root, name=f"{name}.q_scaled")
    if k.type.rank == 3 and past_k is None:  # [B, S, kv_heads * d] to [B, kv_heads, d, S] in one copy
        split = reshape(graph, cast(graph, k, work, f"{name}.k"), (batch, k.type.shape[1], kv_heads, head), f"{name}.k")
        kt = transpose(graph, split, (0, 2, 3, 1), f"{name}.kt")
    else:
        kt = transpose(graph, cast(graph, k4, work, f"{name}.k"), (0, 1, 3, 2), f"{name}.kt")
    kt = graph.add("Mul", kt, root, name=f"{name}.k_scaled")
    stacked_q = reshape(graph, q4, (batch, kv_heads, group * q_seq, head), f"{name}.q")
    qk = reshape(graph, graph.add("MatMul", stacked_q, kt, name=f"{name}.qk"), full, f"{name}.qk")
    if attrs.softcap > 0:
        cap = scalar(graph, attrs.softcap, work, "softcap")
        capped = graph.add("Tanh", graph.add("Div", qk, cap, name=f"{name}.cap"), name=f"{name}.tanh")
        qk = graph.add("Mul", capped, cap, name=f"{name}.softcap")
    with_bias, masked = _mask_scores(graph, node, qk, q_seq, total)
    probs = graph.add("Softmax", with_bias, attrs=SoftmaxAttrs(-1), name=f"{name}.softmax")
    if masked is not None:
        probs = graph.add("Where", masked, scalar(graph, 0.0, work, "zero"), probs, name=f"{name}.probs")

    v_work = cast(graph, v4, work, f"{name}.v")
    stacked_p = reshape(graph, probs, (batch, kv_heads, group * q_seq, total), f"{name}.probs")
    y = reshape(graph, graph.add("MatMul", stacked_p, v_work, name=f"{name}.pv"), (batch, q_heads, q_seq, v_head),
                f"{name}.y")
    if q.type.rank == 3:
        y = reshape(graph, transpose(graph, y, (0, 2, 1, 3), f"{name}.y"), (batch, q_seq, q_heads * v_head),
                    f"{name}.y")
    qk_out = {2: with_bias, 3: probs}.get(attrs.qk_matmul_output_mode, qk)  # each [B, q_heads, S, total]
    return [cast(graph, y, dtype, f"{name}.y"), present_k, present_v, cast(graph, qk_out, dtype, f"{name}.qk_out")]


# RotaryEmbedding --------------------------------------------------------------------------


@lowering("RotaryEmbedding")
def lower_rotary(graph: Graph, node: Node) -> list[Value]:
    """Rotates pairs (x1, x2) of each head's first rotary_embedding_dim features by the
    cached angles: (cos x1 - sin x2, sin x1 + cos x2). Pairs are the two halves, or
    neighbours when interleaved (strided Slices, then stacked back along a new last axis).
    The caches ([S, d/2] or [B, S, d/2], looked up by position_ids when given) get a size-1
    head axis so they broadcast over the heads of either layout."""
    x, cos, sin, positions = node.input(0), node.input(1), node.input(2), node.inputs[3]
    attrs: RotaryAttrs = node.attrs
    name = node.name
    dtype = x.type.dtype
    work = compute_dtype(dtype)
    if x.type.rank == 4:  # [B, heads, S, head]
        xs, head_axis = x, 1
    else:  # [B, S, heads * head] viewed as [B, S, heads, head]
        b, s, hidden = x.type.shape
        xs, head_axis = reshape(graph, x, (b, s, attrs.num_heads, hidden // attrs.num_heads), f"{name}.x"), 2
    head = xs.type.shape[3]
    dim = attrs.rotary_embedding_dim or head
    half = dim // 2
    xs = cast(graph, xs, work, f"{name}.x")

    def angles(cache: Value, label: str) -> Value:
        table = cast(graph, cache, work, f"{name}.{label}")
        if positions is not None:
            table = graph.add("Gather", table, positions, attrs=AxisAttrs(0), name=f"{name}.{label}")
        shape = table.type.shape  # [..., S, half]: a size-1 head axis where x has its heads
        at = len(shape) - (3 - head_axis)
        return reshape(graph, table, shape[:at] + (1,) + shape[at:], f"{name}.{label}")

    cos_t, sin_t = angles(cos, "cos"), angles(sin, "sin")
    if attrs.interleaved:
        x1 = slice_axis(graph, xs, 3, 0, dim, f"{name}.x1", step=2)
        x2 = slice_axis(graph, xs, 3, 1, dim, f"{name}.x2", step=2)
    else:
        x1 = slice_axis(graph, xs, 3, 0, half, f"{name}.x1")
        x2 = slice_axis(graph, xs, 3, half, dim, f"{name}.x2")
    def mul(a: Value, b: Value) -> Value:
        return graph.add("Mul", a, b, name=f"{name}.mul")

    real = graph.add("Sub", mul(cos_t, x1), mul(sin_t, x2), name=f"{name}.real")
    imag = graph.add("Add", mul(sin_t, x1), mul(cos_t, x2), name=f"{name}.imag")
    if attrs.interleaved:
        pair_shape = real.type.shape + (1,)
        pairs = _concat(graph, [reshape(graph, real, pair_shape, f"{name}.real"),
                                reshape(graph, imag, pair_shape, f"{name}.imag")], -1, f"{name}.pairs")
        rotated = reshape(graph, pairs, real.type.shape[:3] + (dim,), f"{name}.rotated")
    else:
        rotated = _concat(graph, [real, imag], 3, f"{name}.rotated")
    if dim < head:
        rotated = _concat(graph, [rotated, slice_axis(graph, xs, 3, dim, head, f"{name}.rest")], 3, f"{name}.y")
    y = cast(graph, rotated, dtype, f"{name}.y")
    return [reshape(graph, y, x.type.shape, f"{name}.y")]


# LinearAttention --------------------------------------------------------------------------


def _step(graph: Graph, x: Value, t: int, shape: tuple[int, ...], name: str) -> Value:
    """Time step t of a [B, T, ...] tensor, reshaped."""
    return reshape(graph, slice_axis(graph, x, 1, t, t + 1, name), shape, name)


@lowering("LinearAttention")
def lower_linear_attention(graph: Graph, node: Node) -> list[Value]:
    """The recurrence unrolled over the static sequence (as GRU): per step a few elementwise
    ops on the state S [B, kv_heads, d_k, d_v] and two small MatMuls (S^T k for the delta
    rules, q S for the output, query heads grouped by their kv head). Inputs stay [B, T, ...]
    so a step is a Slice and Reshapes, never a Transpose."""
    q, k, v, state, decay, beta = node.input(0), node.input(1), node.input(2), *node.inputs[3:6]
    attrs: LinearAttentionAttrs = node.attrs
    name = node.name
    q_heads, kv_heads = attrs.q_num_heads, attrs.kv_num_heads
    b, t = q.type.shape[:2]
    d_k, d_v = q.type.shape[2] // q_heads, v.type.shape[2] // kv_heads
    group = q_heads // kv_heads
    out_types: list[TensorType] = [o.type for o in node.outputs]
    work = compute_dtype(q.type.dtype)
    # The scale multiplies each step's product q S, as the reference computes it (not q first:
    # an infinite scale gives inf * 0 = NaN terms in the sum there).
    scale = scalar(graph, attrs.scale_for(d_k), work, "scale")
    qs = cast(graph, q, work, f"{name}.q")
    k, v = cast(graph, k, work, f"{name}.k"), cast(graph, v, work, f"{name}.v")
    if state is None:
        s: Value = graph.add_constant(np.zeros((b, kv_heads, d_k, d_v), work.numpy), f"{name}.state")
    else:
        s = cast(graph, state, work, f"{name}.state")
    gate = None if decay is None else graph.add("Exp", cast(graph, decay, work, f"{name}.decay"), name=f"{name}.gate")
    w = None if beta is None else cast(graph, beta, work, f"{name}.beta")
    outputs = []
    for i in range(t):
        step = f"{name}.t{i}"
        if gate is not None:  # per head [B, T, H] or per key feature [B, T, H * d_k]
            g_t = _step(graph, gate, i, (b, kv_heads, gate.type.shape[2] // kv_heads, 1), f"{step}.gate")
            s = graph.add("Mul", s, g_t, name=f"{step}.decayed")
        v_t = _step(graph, v, i, (b, kv_heads, 1, d_v), f"{step}.v")
        if w is not None:  # delta rule: write beta (v - S^T k) instead of v; beta [B, T, H or 1]
            k_row = _step(graph, k, i, (b, kv_heads, 1, d_k), f"{step}.k")
            recalled = graph.add("MatMul", k_row, s, name=f"{step}.recall")
            w_t = _step(graph, w, i, (b, w.type.shape[2], 1, 1), f"{step}.beta")
            v_t = graph.add("Mul", w_t, graph.add("Sub", v_t, recalled), name=f"{step}.delta")
        k_col = _step(graph, k, i, (b, kv_heads, d_k, 1), f"{step}.k")
        s = graph.add("Add", s, graph.add("Mul", k_col, v_t), name=f"{step}.state")
        q_t = _step(graph, qs, i, (b, kv_heads, group, d_k), f"{step}.q")
        out = graph.add("MatMul", q_t, s, name=f"{step}.product")  # [B, kv_heads, group, d_v]
        out = graph.add("Mul", out, scale, name=f"{step}.out")
        outputs.append(reshape(graph, out, (b, 1, q_heads * d_v), f"{step}.out"))
    y = _concat(graph, outputs, 1, f"{name}.y")
    return [cast(graph, y, out_types[0].dtype, f"{name}.y"), cast(graph, s, out_types[1].dtype, f"{name}.state")]
