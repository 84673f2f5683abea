"""Converters for the transformer ops of opset 23 and later: Attention (opsets 23-25:
nonpad_kv_seqlen from 24, sliding windows from 25), RotaryEmbedding, LinearAttention and
CausalConvWithState (opset 27; built from Concat, a depthwise Conv and Slice)."""
from __future__ import annotations

import numpy as np

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops.attention import AttentionAttrs, LinearAttentionAttrs, RotaryAttrs
from ember.ops.nn import ConvAttrs
from ember.ops.tensor import AxisAttrs, SliceAttrs
from ember.support.errors import ModelImportError


@converter("Attention", min_opset=23)
def attention(ctx: NodeContext) -> list[Value]:
    # softmax_precision only asks for at least that precision; Ember's softmax is float64.
    ctx.attr_int("softmax_precision", 0)
    scale = ctx.attr_float("scale", None)
    attrs = AttentionAttrs(
        is_causal=ctx.attr_bool("is_causal", False),
        q_num_heads=ctx.attr_int("q_num_heads", 0),
        kv_num_heads=ctx.attr_int("kv_num_heads", 0),
        qk_matmul_output_mode=ctx.attr_int("qk_matmul_output_mode", 0),
        scale=scale if scale else None,  # 0 (the schema default) means the default scale
        softcap=ctx.attr_float("softcap", 0.0),
        left_window_size=ctx.attr_int("left_window_size", -1),
        right_window_size=ctx.attr_int("right_window_size", -1),
    )
    inputs = [ctx.require(0, "Q"), ctx.require(1, "K"), ctx.require(2, "V")] + [ctx.input(i) for i in range(3, 7)]
    return ctx.result("Attention", inputs, attrs)


@converter("RotaryEmbedding", min_opset=23)
def rotary_embedding(ctx: NodeContext) -> list[Value]:
    attrs = RotaryAttrs(ctx.attr_bool("interleaved", False), ctx.attr_int("num_heads", 0),
                        ctx.attr_int("rotary_embedding_dim", 0))
    inputs = [ctx.require(0, "X"), ctx.require(1, "cos_cache"), ctx.require(2, "sin_cache"), ctx.input(3)]
    return ctx.result("RotaryEmbedding", inputs, attrs)


@converter("LinearAttention", min_opset=27)
def linear_attention(ctx: NodeContext) -> list[Value]:
    scale = ctx.attr_float("scale", None)
    attrs = LinearAttentionAttrs(ctx.attr_int("q_num_heads"), ctx.attr_int("kv_num_heads"),
                                 ctx.attr_str("update_rule", "gated_delta"), scale if scale else None)
    ctx.attr_int("chunk_size", 0)  # a tuning hint with no effect on the result
    inputs = [ctx.require(0, "query"), ctx.require(1, "key"), ctx.require(2, "value")] + \
        [ctx.input(i) for i in range(3, 6)]
    return ctx.result("LinearAttention", inputs, attrs)


@converter("CausalConvWithState", min_opset=27)
def causal_conv_with_state(ctx: NodeContext) -> list[Value | None]:
    """A depthwise 1-D convolution over [past_state (or zeros) ++ input] (no padding), an
    optional SiLU, and the last kernel - 1 positions of that padded input as the new state."""
    x, w, bias, past = ctx.require(0, "input"), ctx.require(1, "weight"), ctx.input(2), ctx.input(3)
    activation = ctx.attr_str("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise ModelImportError(f"activation '{activation}' is not none, silu or swish")
    if x.type.rank != 3 or w.type.rank != 3:
        raise ModelImportError(f"input {x.type} and weight {w.type} must be 3-D ([B, C, L] and [C, 1, k])")
    batch, channels, length = x.type.shape
    k = w.type.shape[2]
    if k < 1:
        raise ModelImportError(f"weight {w.type} has an empty kernel (its last axis is 0)")
    if past is None:
        past = ctx.add_constant(np.zeros((batch, channels, k - 1), x.type.dtype.numpy), f"{ctx.name}_zero_state")
    padded = ctx.emit1("Concat", [past, x], AxisAttrs(2)) if k > 1 else x
    conv = ctx.emit1("Conv", [padded, w, bias], ConvAttrs((1,), (0, 0), (1,), channels))
    y = ctx.result("Silu", [conv])[0] if activation != "none" else conv
    total = length + k - 1
    if k == 1:  # no state to carry: an empty [B, C, 0]
        return [y, ctx.constant_result(np.zeros((batch, channels, 0), x.type.dtype.numpy), 1)]
    state = ctx.emit("Slice", [padded], SliceAttrs((2,), (length,), (total,), (1,)),
                     [ctx.output_name(1) or f"{ctx.name}_state"])[0]
    return [y, state]
