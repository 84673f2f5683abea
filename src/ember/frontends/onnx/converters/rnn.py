"""Converters for the ONNX recurrent ops RNN, GRU and LSTM. Batch-major models (layout=1)
are transposed to Ember's layout 0 ([seq, batch, input]) around the op. GRU takes the
default activations, no clip and full-length sequences (it is lowered to primitives); RNN
and LSTM take any ONNX activation, clip and per-batch sequence lengths."""
from __future__ import annotations

import numpy as np

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops.recurrent import GRUAttrs, RecurrentAttrs
from ember.ops.tensor import TransposeAttrs
from ember.support.errors import ModelImportError, UnsupportedError

_DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}
_DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}


def _direction(ctx: NodeContext) -> str:
    direction = ctx.attr_str("direction", "forward")
    if direction not in _DIRECTIONS:
        raise ModelImportError(f"direction '{direction}' is not forward, reverse or bidirectional")
    return direction


def _transpose(ctx: NodeContext, v: Value | None, perm: tuple[int, ...], name: str | None = None) -> Value | None:
    if v is None:
        return None
    if name is not None:
        return ctx.emit("Transpose", [v], TransposeAttrs(perm), [name])[0]
    return ctx.emit1("Transpose", [v], TransposeAttrs(perm))


def _recurrent(ctx: NodeContext, op: str, attrs, inputs: list[Value | None], states: list[int]) -> list[Value | None]:
    """Emits `op`; with layout=1, transposes X and the initial states in and Y and the final
    states out (inputs[i] for i in `states` are initial states [dirs, batch, hidden])."""
    if not ctx.attr_bool("layout", False):
        return list(ctx.result(op, inputs, attrs))
    inputs = list(inputs)
    inputs[0] = _transpose(ctx, inputs[0], (1, 0, 2))
    for i in states:
        inputs[i] = _transpose(ctx, inputs[i], (1, 0, 2))
    results = ctx.emit(op, inputs, attrs)
    outputs = [_transpose(ctx, results[0], (2, 0, 1, 3), ctx.output_name(0) or None)]
    outputs += [_transpose(ctx, r, (1, 0, 2), ctx.output_name(i + 1) or None) for i, r in enumerate(results[1:])]
    return outputs


def _activations(ctx: NodeContext, op: str, directions: int) -> tuple[tuple[str, ...], tuple, tuple]:
    names = ctx.attr_strs("activations", None)
    defaults = _DEFAULT_ACTIVATIONS[op] * directions
    names = defaults if names is None else tuple(names)
    if len(names) != len(defaults):
        raise ModelImportError(f"activations {list(names)} must name {len(defaults)} functions")
    alphas = ctx.attr_floats("activation_alpha", None) or ()
    betas = ctx.attr_floats("activation_beta", None) or ()
    # ONNX lists alpha/beta only for the activations that take them, in order.
    takes_alpha = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
    takes_beta = {"affine", "scaledtanh", "hardsigmoid"}
    alpha_iter, beta_iter = iter(alphas), iter(betas)
    per_alpha = tuple(next(alpha_iter, None) if n.lower() in takes_alpha else None for n in names)
    per_beta = tuple(next(beta_iter, None) if n.lower() in takes_beta else None for n in names)
    return names, per_alpha, per_beta


@converter("RNN", "LSTM")
def rnn(ctx: NodeContext) -> list[Value | None]:
    op = ctx.op_type
    x, w, r = ctx.require(0, "X"), ctx.require(1, "W"), ctx.require(2, "R")
    direction = _direction(ctx)
    if op == "LSTM" and ctx.attr_bool("input_forget", False):
        raise UnsupportedError("input_forget=1 (coupled input and forget gates) is not supported")
    names, alphas, betas = _activations(ctx, op, _DIRECTIONS[direction])
    if x.type.rank != 3 or w.type.rank != 3 or r.type.rank != 3:
        raise ModelImportError(f"X {x.type}, W {w.type} and R {r.type} must have rank 3")
    hidden = ctx.attr_int("hidden_size", r.type.shape[-1])
    attrs = RecurrentAttrs(hidden, direction, names, alphas, betas, ctx.attr_float("clip", None))
    count = 8 if op == "LSTM" else 6
    inputs = [x, w, r] + [ctx.input(i) for i in range(3, count)]
    return _recurrent(ctx, op, attrs, inputs, [5, 6] if op == "LSTM" else [5])


@converter("GRU")
def gru(ctx: NodeContext) -> list[Value | None]:
    x, w, r = ctx.require(0, "X"), ctx.require(1, "W"), ctx.require(2, "R")
    b, seq_lens, h0 = ctx.input(3), ctx.input(4), ctx.input(5)
    direction = _direction(ctx)
    if ctx.has_attr("clip"):
        raise UnsupportedError("attribute 'clip' (cell clipping) is not supported")
    activations = ctx.attr_strs("activations", None)
    default = ("sigmoid", "tanh") * _DIRECTIONS[direction]
    if activations is not None and tuple(a.lower() for a in activations) != default:
        raise UnsupportedError(f"activations {list(activations)} are not supported; Ember's GRU uses "
                               f"Sigmoid and Tanh (the default)")
    if x.type.rank != 3 or w.type.rank != 3 or r.type.rank != 3:
        raise ModelImportError(f"X {x.type}, W {w.type} and R {r.type} must have rank 3")
    hidden = ctx.attr_int("hidden_size", r.type.shape[-1])
    if seq_lens is not None:
        lengths = ctx.constant(4, "sequence_lens")
        seq = x.type.shape[1 if ctx.attr_bool("layout", False) else 0]
        if not np.all(lengths == seq):
            raise UnsupportedError(f"sequence_lens {lengths.tolist()} differ from the sequence length {seq}; "
                                   "Ember's GRU supports full-length sequences only")
    attrs = GRUAttrs(hidden, direction, ctx.attr_bool("linear_before_reset", False))
    return _recurrent(ctx, "GRU", attrs, [x, w, r, b, h0], [4])
