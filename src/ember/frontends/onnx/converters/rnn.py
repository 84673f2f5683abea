"""Converter for the ONNX GRU: layout 0, default activations, no clip, and sequence_lens
either absent or constant and equal to the (static) sequence length."""
from __future__ import annotations

import numpy as np

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops.rnn import GRUAttrs
from ember.support.errors import ImportError_, UnsupportedError

_DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


@converter("GRU")
def gru(ctx: NodeContext) -> list[Value]:
    x, w, r = ctx.require(0, "X"), ctx.require(1, "W"), ctx.require(2, "R")
    b, seq_lens, h0 = ctx.input(3), ctx.input(4), ctx.input(5)
    direction = ctx.attr_str("direction", "forward")
    if direction not in _DIRECTIONS:
        raise ImportError_(f"direction '{direction}' is not forward, reverse or bidirectional")
    layout = ctx.attr_int("layout", 0)
    if layout != 0:
        raise UnsupportedError(f"layout={layout} (batch-major) is not supported; Ember's GRU takes layout=0 "
                               "([seq, batch, input])")
    if ctx.has_attr("clip"):
        raise UnsupportedError("attribute 'clip' (cell clipping) is not supported")
    activations = ctx.attr_strs("activations", None)
    default = ("sigmoid", "tanh") * _DIRECTIONS[direction]
    if activations is not None and tuple(a.lower() for a in activations) != default:
        raise UnsupportedError(f"activations {list(activations)} are not supported; Ember's GRU uses "
                               f"Sigmoid and Tanh (the default)")
    if x.type.rank != 3 or r.type.rank != 3:
        raise ImportError_(f"X {x.type} and R {r.type} must have rank 3")
    hidden = ctx.attr_int("hidden_size", r.type.shape[-1])
    if seq_lens is not None:
        lengths = ctx.constant(4, "sequence_lens")
        seq = x.type.shape[0]
        if not np.all(lengths == seq):
            raise UnsupportedError(f"sequence_lens {lengths.tolist()} differ from the sequence length {seq}; "
                                   "Ember supports full-length sequences only")
    attrs = GRUAttrs(hidden, direction, bool(ctx.attr_int("linear_before_reset", 0)))
    return ctx.result("GRU", [x, w, r, b, h0], attrs)
