"""Lowering of GRU: the sequence length is static, so the recurrence unrolls into one MatMul
for all input projections plus, per time step, one MatMul for the recurrent projection and a
few elementwise ops. Weight slicing and transposes are on constants and fold away."""
from __future__ import annotations

import numpy as np

from ember.graph import Graph, Node, Value
from ember.lowering.engine import lowering
from ember.ops.recurrent import GRUAttrs
from ember.ops.tensor import AxisAttrs, ReshapeAttrs, SliceAttrs, TransposeAttrs


def _slice(graph: Graph, x: Value, axis: int, start: int, end: int, name: str) -> Value:
    return graph.add("Slice", x, attrs=SliceAttrs((axis,), (start,), (end,), (1,)), name=name)


def _reshape(graph: Graph, x: Value, shape: tuple[int, ...], name: str) -> Value:
    return graph.add("Reshape", x, attrs=ReshapeAttrs(shape), name=name)


def _transposed_direction(graph: Graph, weights: Value, k: int, name: str) -> Value:
    """weights[k].T for a [directions, rows, cols] tensor."""
    _, rows, cols = weights.type.shape
    one = _reshape(graph, _slice(graph, weights, 0, k, k + 1, name), (rows, cols), name)
    return graph.add("Transpose", one, attrs=TransposeAttrs((1, 0)), name=name)


def _direction(graph: Graph, node: Node, k: int, reverse: bool) -> tuple[list[Value], Value]:
    """Unrolls one direction; returns the per-step hidden states in time order and the last."""
    x, w, r = node.input(0), node.input(1), node.input(2)
    b, h0 = node.inputs[3:]
    attrs: GRUAttrs = node.attrs
    seq, batch, inputs = x.type.shape
    hidden = attrs.hidden_size
    dtype = x.type.dtype
    prefix = f"{node.name}.d{k}"
    w_t = _transposed_direction(graph, w, k, f"{prefix}.w")  # [in, 3H]
    r_t = _transposed_direction(graph, r, k, f"{prefix}.r")  # [H, 3H]
    r_zr = _slice(graph, r_t, 1, 0, 2 * hidden, f"{prefix}.r_zr")
    r_h = _slice(graph, r_t, 1, 2 * hidden, 3 * hidden, f"{prefix}.r_h")
    if b is None:
        b = graph.add_constant(np.zeros((attrs.num_directions, 6 * hidden), dtype.numpy), f"{prefix}.b")
    bias = _reshape(graph, _slice(graph, b, 0, k, k + 1, f"{prefix}.b"), (6 * hidden,), f"{prefix}.b")
    w_bias = _slice(graph, bias, 0, 0, 3 * hidden, f"{prefix}.wb")
    r_bias = _slice(graph, bias, 0, 3 * hidden, 6 * hidden, f"{prefix}.rb")
    # The z and r gates add both biases outside any product, so they join the input projection;
    # the candidate's recurrent bias stays separate (it sits inside r * (...) with
    # linear_before_reset).
    zr_mask = np.concatenate([np.ones(2 * hidden), np.zeros(hidden)]).astype(dtype.numpy)
    r_bias_zr = graph.add("Mul", r_bias, graph.add_constant(zr_mask, f"{prefix}.mask"))
    x_bias = graph.add("Add", w_bias, r_bias_zr, name=f"{prefix}.xbias")
    r_bias_h = _slice(graph, r_bias, 0, 2 * hidden, 3 * hidden, f"{prefix}.rbh")

    flat_x = _reshape(graph, x, (seq * batch, inputs), f"{prefix}.x")
    projected = graph.add("Add", graph.add("MatMul", flat_x, w_t, name=f"{prefix}.xw"), x_bias,
                          name=f"{prefix}.xwb")
    if h0 is None:
        h: Value = graph.add_constant(np.zeros((batch, hidden), dtype.numpy), f"{prefix}.h0")
    else:
        h = _reshape(graph, _slice(graph, h0, 0, k, k + 1, f"{prefix}.h0"), (batch, hidden), f"{prefix}.h0")

    states: list[Value | None] = [None] * seq
    for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
        step = f"{prefix}.t{t}"
        x_t = _slice(graph, projected, 0, t * batch, (t + 1) * batch, f"{step}.x")
        x_zr = _slice(graph, x_t, 1, 0, 2 * hidden, f"{step}.xzr")
        x_h = _slice(graph, x_t, 1, 2 * hidden, 3 * hidden, f"{step}.xh")
        gates = graph.add("Sigmoid", graph.add("Add", x_zr, graph.add("MatMul", h, r_zr, name=f"{step}.hzr")),
                          name=f"{step}.gates")
        z = _slice(graph, gates, 1, 0, hidden, f"{step}.z")
        reset = _slice(graph, gates, 1, hidden, 2 * hidden, f"{step}.r")
        if attrs.linear_before_reset:
            h_proj = graph.add("Add", graph.add("MatMul", h, r_h, name=f"{step}.hh"), r_bias_h)
            pre = graph.add("Add", x_h, graph.add("Mul", reset, h_proj))
        else:
            h_proj = graph.add("MatMul", graph.add("Mul", reset, h), r_h, name=f"{step}.hh")
            pre = graph.add("Add", graph.add("Add", x_h, h_proj), r_bias_h)
        candidate = graph.add("Tanh", pre, name=f"{step}.candidate")
        # (1 - z) * c + z * h == c + z * (h - c): one op fewer, same value.
        h = graph.add("Add", candidate, graph.add("Mul", z, graph.add("Sub", h, candidate)), name=f"{step}.h")
        states[t] = h
    return [s for s in states if s is not None], h


@lowering("GRU")
def lower_gru(graph: Graph, node: Node) -> list[Value]:
    x = node.input(0)
    attrs: GRUAttrs = node.attrs
    seq, batch, _ = x.type.shape
    hidden = attrs.hidden_size
    per_direction_y: list[Value] = []
    last_states: list[Value] = []
    for k in range(attrs.num_directions):
        reverse = attrs.direction == "reverse" or k == 1
        states, last = _direction(graph, node, k, reverse)
        steps = [_reshape(graph, s, (1, 1, batch, hidden), f"{node.name}.y{k}") for s in states]
        per_direction_y.append(graph.add("Concat", *steps, attrs=AxisAttrs(0), name=f"{node.name}.y{k}"))
        last_states.append(_reshape(graph, last, (1, batch, hidden), f"{node.name}.h{k}"))
    y = per_direction_y[0] if len(per_direction_y) == 1 else graph.add(
        "Concat", *per_direction_y, attrs=AxisAttrs(1), name=f"{node.name}.y")
    y_h = last_states[0] if len(last_states) == 1 else graph.add(
        "Concat", *last_states, attrs=AxisAttrs(0), name=f"{node.name}.y_h")
    return [y, y_h]
