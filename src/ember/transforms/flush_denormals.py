"""`flush-denormal-weights`: subnormal numbers in the constant weights and biases of
contractions become zeros of the same sign.

Trained models carry them (PP-OCRv4's recognizer: 31,350 constants below 2^-126, 22% of one
squeeze-excitation layer's weights), and x86 cores from Intel take a microcode assist on every
multiply with a subnormal operand: that layer's 58K multiply-adds ran 60x slower than with
normal weights (0.13 ms against 0.002 ms, Xeon with AVX-512). Flushing changes a product by
less than 2^-126 times the other operand, below the rounding of any sum that also holds a
normal term; the constants' new names (suffix `.flushed`) show in `ember dump` where it
happened. Only weights and biases are flushed, not the activations (which would need the
FTZ/DAZ modes and would change results a model may rely on), and only float32 (16-bit
weights are widened to float32 where their subnormals become normal numbers).

Imports passes/ and graph/ only."""
from __future__ import annotations

import numpy as np

from ember.graph import Node, Value
from ember.passes import RewritePass, Rewriter, pattern, register_pass
from ember.passes.match import constant_data

# Ops whose constant operands are weights read on every run: their multiplies are where
# subnormals cost (an elementwise op reads each constant once per element at most).
CONTRACTIONS = frozenset({"Conv", "ConvTranspose", "FusedConv", "Gemm", "MatMul", "FullyConnected", "GRU", "LSTM",
                          "RNN"})
_SMALLEST_NORMAL = np.finfo(np.float32).tiny


def _subnormals(data: np.ndarray) -> np.ndarray | None:
    """Where `data` holds subnormal numbers, or None where it holds none. One pass over the
    magnitudes first: most weights have none, and that answer costs half of the exact mask (a
    cached compile of ResNet-18 spent 16 ms here)."""
    small = np.abs(data) < _SMALLEST_NORMAL
    if not small.any():
        return None
    tiny = small & (data != 0)
    return tiny if tiny.any() else None


@pattern(*CONTRACTIONS)
def flush_operands(rw: Rewriter, node: Node) -> list[Value] | None:
    operands: list[Value | None] = list(node.inputs)
    changed = False
    for i, value in enumerate(operands):
        data = constant_data(value)
        if value is None or data is None or data.dtype != np.float32:
            continue
        tiny = _subnormals(data)
        if tiny is None:
            continue
        operands[i] = rw.constant(np.where(tiny, np.copysign(np.float32(0), data), data).astype(np.float32),
                                  f"{value.name}.flushed")
        changed = True
    if not changed:
        return None
    return list(rw.add_node(node.op, operands, node.attrs))


@register_pass
class FlushDenormalWeights(RewritePass):
    """Preconditions: none.
    Rules:
    1. A float32 constant operand of a contraction (CONTRACTIONS) holding subnormal numbers
       is replaced by a copy in which they are zeros of their sign, named `<name>.flushed`.
    2. Every other operand, the node's name and its attributes stay."""

    name = "flush-denormal-weights"
    patterns = (flush_operands,)
