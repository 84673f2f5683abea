"""Lowering of the attention family (Attention, RotaryEmbedding, LinearAttention, ...) onto
MatMul, Softmax and elementwise primitives."""
