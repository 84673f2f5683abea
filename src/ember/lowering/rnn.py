"""Lowering of the recurrent ops (GRU, LSTM, RNN). The sequence length is static, so the
recurrence unrolls: ONE MatMul projects the inputs of every time step (with both biases
added once), and each step adds only the recurrent MatMul and a few elementwise ops. Weight
slicing and transposes are on constants and fold away; with constant weights the cpu
backend's post-lowering pipeline turns each MatMul + bias/residual Add (+ activation) into a
FullyConnected GEMM with a fused epilogue.

Per-batch sequence lengths (RNN, LSTM) mask the state updates: a batch past its length keeps
its state and writes zeros into Y. A reverse direction with lengths runs forward over the
input reversed per batch (ReverseSequence), and its Y is reversed back the same way."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ember.graph import Constant, Graph, Node, Value
from ember.lowering.engine import lowering, scalar
from ember.ops.elementwise import AlphaAttrs, AlphaBetaAttrs, ClipAttrs
from ember.ops.indexing import ReverseSequenceAttrs
from ember.ops.math import ThresholdAttrs
from ember.ops.recurrent import GRUAttrs, RecurrentAttrs
from ember.ops.tensor import AxisAttrs, ReshapeAttrs, SliceAttrs, TransposeAttrs
from ember.support.errors import UnsupportedError

# A step: (step name, projected input x_t [batch, G*H], states) -> new states, H first.
Cell = Callable[[str, Value, list[Value]], list[Value]]


def _slice(graph: Graph, x: Value, axis: int, start: int, end: int, name: str) -> Value:
    return graph.add("Slice", x, attrs=SliceAttrs((axis,), (start,), (end,), (1,)), name=name)


def _reshape(graph: Graph, x: Value, shape: tuple[int, ...], name: str) -> Value:
    return graph.add("Reshape", x, attrs=ReshapeAttrs(shape), name=name)


def _direction_slice(graph: Graph, tensor: Value, k: int, name: str) -> Value:
    """tensor[k] for a [directions, ...] tensor."""
    return _reshape(graph, _slice(graph, tensor, 0, k, k + 1, name), tensor.type.shape[1:], name)


def _transposed_direction(graph: Graph, weights: Value, k: int, name: str) -> Value:
    """weights[k].T for a [directions, rows, cols] tensor."""
    return graph.add("Transpose", _direction_slice(graph, weights, k, name), attrs=TransposeAttrs((1, 0)), name=name)


def _project(graph: Graph, x: Value, w: Value, k: int, bias: Value | None, prefix: str) -> Value:
    """x [seq, batch, in] @ w[k].T (+ bias) as [seq * batch, G*H]: every step's input
    projection in one GEMM."""
    seq, batch, inputs = x.type.shape
    flat_x = _reshape(graph, x, (seq * batch, inputs), f"{prefix}.x")
    projected = graph.add("MatMul", flat_x, _transposed_direction(graph, w, k, f"{prefix}.w"), name=f"{prefix}.xw")
    return projected if bias is None else graph.add("Add", projected, bias, name=f"{prefix}.xwb")


def _initial(graph: Graph, state: Value | None, k: int, batch: int, hidden: int, x: Value, name: str) -> Value:
    if state is None:
        return graph.add_constant(np.zeros((batch, hidden), x.type.dtype.numpy), name)
    return _direction_slice(graph, state, k, name)


def _step_rows(graph: Graph, projected: Value, t: int, batch: int, name: str) -> Value:
    return _slice(graph, projected, 0, t * batch, (t + 1) * batch, name)


def _stack(graph: Graph, states: list[Value], name: str) -> Value:
    """Per-step [batch, H] states in time order -> [seq, batch, H]."""
    batch, hidden = states[0].type.shape
    steps = [_reshape(graph, s, (1, batch, hidden), name) for s in states]
    return steps[0] if len(steps) == 1 else graph.add("Concat", *steps, attrs=AxisAttrs(0), name=name)


def _gru_direction(graph: Graph, node: Node, k: int, reverse: bool) -> tuple[list[Value], Value]:
    """Unrolls one direction; returns the per-step hidden states in time order and the last."""
    x, w, r = node.input(0), node.input(1), node.input(2)
    b, h0 = node.inputs[3:]
    attrs: GRUAttrs = node.attrs
    seq, batch, _ = x.type.shape
    hidden = attrs.hidden_size
    dtype = x.type.dtype
    prefix = f"{node.name}.d{k}"
    r_t = _transposed_direction(graph, r, k, f"{prefix}.r")  # [H, 3H]
    if b is None:
        b = graph.add_constant(np.zeros((attrs.num_directions, 6 * hidden), dtype.numpy), f"{prefix}.b")
    bias = _direction_slice(graph, b, k, f"{prefix}.b")
    w_bias = _slice(graph, bias, 0, 0, 3 * hidden, f"{prefix}.wb")
    r_bias = _slice(graph, bias, 0, 3 * hidden, 6 * hidden, f"{prefix}.rb")
    # The z and r gates add both biases outside any product, so they join the input projection;
    # the candidate's recurrent bias stays separate (it sits inside r * (...) with
    # linear_before_reset).
    zr_mask = np.concatenate([np.ones(2 * hidden), np.zeros(hidden)]).astype(dtype.numpy)
    r_bias_zr = graph.add("Mul", r_bias, graph.add_constant(zr_mask, f"{prefix}.mask"))
    x_bias = graph.add("Add", w_bias, r_bias_zr, name=f"{prefix}.xbias")
    if attrs.linear_before_reset:
        # Every gate's recurrent product reads h: one product with all of R a step (one pass
        # over its weights, one GEMV), the candidate's recurrent bias added to it.
        r_bias_h = graph.add("Mul", r_bias, graph.add_constant(1 - zr_mask, f"{prefix}.hmask"))  # [0, 0, Rb_h]
    else:
        r_zr = _slice(graph, r_t, 1, 0, 2 * hidden, f"{prefix}.r_zr")
        r_h = _slice(graph, r_t, 1, 2 * hidden, 3 * hidden, f"{prefix}.r_h")
        r_bias_h = _slice(graph, r_bias, 0, 2 * hidden, 3 * hidden, f"{prefix}.rbh")
    projected = _project(graph, x, w, k, x_bias, prefix)
    h = _initial(graph, h0, k, batch, hidden, x, f"{prefix}.h0")

    states: list[Value | None] = [None] * seq
    for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
        step = f"{prefix}.t{t}"
        x_t = _step_rows(graph, projected, t, batch, f"{step}.x")
        x_zr = _slice(graph, x_t, 1, 0, 2 * hidden, f"{step}.xzr")
        x_h = _slice(graph, x_t, 1, 2 * hidden, 3 * hidden, f"{step}.xh")
        if attrs.linear_before_reset:
            h_all = graph.add("Add", graph.add("MatMul", h, r_t, name=f"{step}.hr"), r_bias_h, name=f"{step}.hrb")
            h_zr = _slice(graph, h_all, 1, 0, 2 * hidden, f"{step}.hzr")
        else:
            h_zr = graph.add("MatMul", h, r_zr, name=f"{step}.hzr")
        gates = graph.add("Sigmoid", graph.add("Add", x_zr, h_zr), name=f"{step}.gates")
        z = _slice(graph, gates, 1, 0, hidden, f"{step}.z")
        reset = _slice(graph, gates, 1, hidden, 2 * hidden, f"{step}.r")
        if attrs.linear_before_reset:
            h_proj = _slice(graph, h_all, 1, 2 * hidden, 3 * hidden, f"{step}.hh")
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
    attrs: GRUAttrs = node.attrs
    ys: list[Value] = []
    last_states: list[Value] = []
    for k in range(attrs.num_directions):
        states, last = _gru_direction(graph, node, k, attrs.direction == "reverse" or k == 1)
        ys.append(_stack(graph, states, f"{node.name}.y{k}"))
        last_states.append(last)
    return _outputs(graph, node, ys, [last_states])


def _outputs(graph: Graph, node: Node, ys: list[Value], finals: list[list[Value]]) -> list[Value]:
    """Y [seq, dirs, batch, H] from each direction's [seq, batch, H], and each final state
    [dirs, batch, H] from the directions' [batch, H]."""
    seq, batch, hidden = ys[0].type.shape
    parts = [_reshape(graph, y, (seq, 1, batch, hidden), f"{node.name}.y") for y in ys]
    y = parts[0] if len(parts) == 1 else graph.add("Concat", *parts, attrs=AxisAttrs(1), name=f"{node.name}.y")
    results = [y]
    for i, last in enumerate(finals):
        parts = [_reshape(graph, s, (1, batch, hidden), f"{node.name}.s{i}") for s in last]
        results.append(parts[0] if len(parts) == 1 else graph.add("Concat", *parts, attrs=AxisAttrs(0),
                                                                 name=f"{node.name}.s{i}"))
    return results


# RNN and LSTM ------------------------------------------------------------------------------

def _activation(graph: Graph, name: str, alpha: float | None, beta: float | None, x: Value, label: str) -> Value:
    """An ONNX recurrent activation (by name, with its alpha/beta or their defaults) as ops."""
    kind = name.lower()
    dtype = x.type.dtype

    def a_or(default: float) -> float:
        return default if alpha is None else alpha

    def b_or(default: float) -> float:
        return default if beta is None else beta

    simple = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "softsign": "Softsign", "softplus": "Softplus"}
    if kind in simple:
        return graph.add(simple[kind], x, name=label)
    if kind == "leakyrelu":
        return graph.add("LeakyRelu", x, attrs=AlphaAttrs(a_or(0.01)), name=label)
    if kind == "elu":
        return graph.add("Elu", x, attrs=AlphaAttrs(a_or(1.0)), name=label)
    if kind == "thresholdedrelu":
        return graph.add("ThresholdedRelu", x, attrs=ThresholdAttrs(a_or(1.0)), name=label)
    if kind == "hardsigmoid":
        return graph.add("HardSigmoid", x, attrs=AlphaBetaAttrs(a_or(0.2), b_or(0.5)), name=label)
    if kind == "affine":
        scaled = graph.add("Mul", x, scalar(graph, a_or(1.0), dtype, f"{label}.alpha"), name=label)
        return graph.add("Add", scaled, scalar(graph, b_or(0.0), dtype, f"{label}.beta"), name=label)
    if kind == "scaledtanh":
        inner = graph.add("Mul", x, scalar(graph, b_or(1.0), dtype, f"{label}.beta"), name=label)
        return graph.add("Mul", graph.add("Tanh", inner, name=label), scalar(graph, a_or(1.0), dtype, f"{label}.alpha"),
                         name=label)
    raise UnsupportedError(f"recurrent activation '{name}' has no lowering")


def _activations(graph: Graph, attrs: RecurrentAttrs, k: int, count: int) -> list[Callable[[Value, str], Value]]:
    """Direction k's activations as functions (value, label) -> value."""
    per = len(attrs.activations) // attrs.num_directions
    names = attrs.activations[k * per:(k + 1) * per]
    alphas = attrs.alphas or (None,) * len(attrs.activations)
    betas = attrs.betas or (None,) * len(attrs.activations)

    def bound(i: int) -> Callable[[Value, str], Value]:
        j = k * per + i
        return lambda v, label: _activation(graph, names[i], alphas[j], betas[j], v, label)

    return [bound(i) for i in range(count)]


def _clip(graph: Graph, attrs: RecurrentAttrs, v: Value, label: str) -> Value:
    if attrs.clip is None:
        return v
    return graph.add("Clip", v, attrs=ClipAttrs(-attrs.clip, attrs.clip), name=label)


def _lengths(x: Value, lens: Value | None) -> Value | None:
    """The sequence lengths to mask with, None when every batch runs the whole sequence (no
    input, or a constant with every length >= seq)."""
    if lens is None:
        return None
    if isinstance(lens, Constant) and bool(np.all(lens.data >= x.type.shape[0])):
        return None
    return lens


def _unroll(graph: Graph, node: Node, k: int, gates: int, cell: Cell,
            initial: list[Value | None]) -> tuple[Value, list[Value]]:
    """Runs direction k of an RNN/LSTM node: Y of this direction [seq, batch, H] and the final
    states. Both biases (W's and R's) join the input projection."""
    x, w, _, b, lens_input = node.inputs[:5]
    assert x is not None and w is not None
    attrs: RecurrentAttrs = node.attrs
    seq, batch, _ = x.type.shape
    hidden = attrs.hidden_size
    prefix = f"{node.name}.d{k}"
    reverse = attrs.direction == "reverse" or k == 1
    lens = _lengths(x, lens_input)
    if reverse and lens is not None:
        # Each batch's own last valid step comes first: reverse its valid prefix, run forward.
        x = graph.add("ReverseSequence", x, lens, attrs=ReverseSequenceAttrs(1, 0), name=f"{prefix}.reverse")
        reverse = False
    bias = None
    if b is not None:
        both = _direction_slice(graph, b, k, f"{prefix}.b")
        bias = graph.add("Add", _slice(graph, both, 0, 0, gates * hidden, f"{prefix}.wb"),
                         _slice(graph, both, 0, gates * hidden, 2 * gates * hidden, f"{prefix}.rb"), name=f"{prefix}.b")
    projected = _project(graph, x, w, k, bias, prefix)
    states = [_initial(graph, s, k, batch, hidden, x, f"{prefix}.s{i}") for i, s in enumerate(initial)]
    masks = None
    if lens is not None:
        steps = graph.add_constant(np.arange(seq, dtype=lens.type.dtype.numpy).reshape(seq, 1, 1), f"{prefix}.steps")
        masks = graph.add("Less", steps, _reshape(graph, lens, (1, batch, 1), f"{prefix}.lens"), name=f"{prefix}.mask")
    zero = scalar(graph, 0.0, x.type.dtype, f"{prefix}.zero")
    ys: list[Value | None] = [None] * seq
    for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
        step = f"{prefix}.t{t}"
        new = cell(step, _step_rows(graph, projected, t, batch, f"{step}.x"), states)
        if masks is None:
            states, ys[t] = new, new[0]
            continue
        active = _reshape(graph, _slice(graph, masks, 0, t, t + 1, f"{step}.active"), (batch, 1), f"{step}.active")
        states = [graph.add("Where", active, n, s, name=f"{step}.keep") for n, s in zip(new, states, strict=True)]
        ys[t] = graph.add("Where", active, new[0], zero, name=f"{step}.y")
    if seq == 0:  # no step: an empty Y, and the final states are the initial ones
        y: Value = graph.add_constant(np.zeros((0, batch, hidden), x.type.dtype.numpy), f"{prefix}.y")
        return y, states
    y = _stack(graph, [s for s in ys if s is not None], f"{prefix}.y")
    if lens is not None and (attrs.direction == "reverse" or k == 1):
        y = graph.add("ReverseSequence", y, lens, attrs=ReverseSequenceAttrs(1, 0), name=f"{prefix}.unreverse")
    return y, states


def _recurrent_matmul(graph: Graph, node: Node, k: int, prefix: str) -> Value:
    """R[k].T [H, G*H]: h_prev @ it is the recurrent term."""
    return _transposed_direction(graph, node.input(2), k, f"{prefix}.r")


@lowering("RNN")
def lower_rnn(graph: Graph, node: Node) -> list[Value]:
    attrs: RecurrentAttrs = node.attrs
    ys: list[Value] = []
    finals: list[Value] = []
    for k in range(attrs.num_directions):
        r_t = _recurrent_matmul(graph, node, k, f"{node.name}.d{k}")
        (f,) = _activations(graph, attrs, k, 1)

        def cell(step: str, x_t: Value, states: list[Value], r_t: Value = r_t, f=f) -> list[Value]:
            pre = graph.add("Add", graph.add("MatMul", states[0], r_t, name=f"{step}.hr"), x_t, name=f"{step}.pre")
            return [f(_clip(graph, attrs, pre, f"{step}.clip"), f"{step}.h")]

        y, (h,) = _unroll(graph, node, k, 1, cell, [node.inputs[5]])
        ys.append(y)
        finals.append(h)
    return _outputs(graph, node, ys, [finals])


@lowering("LSTM")
def lower_lstm(graph: Graph, node: Node) -> list[Value]:
    attrs: RecurrentAttrs = node.attrs
    hidden = attrs.hidden_size
    peepholes = node.inputs[7]
    ys: list[Value] = []
    finals: list[list[Value]] = [[], []]
    for k in range(attrs.num_directions):
        prefix = f"{node.name}.d{k}"
        r_t = _recurrent_matmul(graph, node, k, prefix)
        f, g, act_h = _activations(graph, attrs, k, 3)
        p = None
        if peepholes is not None:
            both = _direction_slice(graph, peepholes, k, f"{prefix}.p")
            p = [_slice(graph, both, 0, j * hidden, (j + 1) * hidden, f"{prefix}.p{j}") for j in range(3)]

        def cell(step: str, x_t: Value, states: list[Value], r_t: Value = r_t, f=f, g=g, act_h=act_h,
                 p: list[Value] | None = p) -> list[Value]:
            h_prev, c_prev = states
            gates = graph.add("Add", graph.add("MatMul", h_prev, r_t, name=f"{step}.hr"), x_t, name=f"{step}.gates")

            def gate(j: int) -> Value:
                return _slice(graph, gates, 1, j * hidden, (j + 1) * hidden, f"{step}.g{j}")

            def peep(v: Value, j: int, c: Value) -> Value:
                if p is None:
                    return v
                return graph.add("Add", v, graph.add("Mul", p[j], c, name=f"{step}.p{j}"), name=f"{step}.p{j}")

            if p is None:
                # ONNX orders the gates i, o, f, c: the first three share activation f, so one
                # op (clipped once) covers them.
                sig = f(_clip(graph, attrs, _slice(graph, gates, 1, 0, 3 * hidden, f"{step}.iof"), f"{step}.clip"),
                        f"{step}.iof")
                i_t, o_t, f_t = (_slice(graph, sig, 1, j * hidden, (j + 1) * hidden, f"{step}.a{j}")
                                 for j in range(3))
                c_hat = g(_clip(graph, attrs, gate(3), f"{step}.clipc"), f"{step}.chat")
            else:
                i_t = f(_clip(graph, attrs, peep(gate(0), 0, c_prev), f"{step}.clipi"), f"{step}.i")
                f_t = f(_clip(graph, attrs, peep(gate(2), 2, c_prev), f"{step}.clipf"), f"{step}.f")
                c_hat = g(_clip(graph, attrs, gate(3), f"{step}.clipc"), f"{step}.chat")
            c = graph.add("Add", graph.add("Mul", f_t, c_prev, name=f"{step}.fc"),
                          graph.add("Mul", i_t, c_hat, name=f"{step}.ic"), name=f"{step}.c")
            if p is not None:
                o_t = f(_clip(graph, attrs, peep(gate(1), 1, c), f"{step}.clipo"), f"{step}.o")
            h = graph.add("Mul", o_t, act_h(c, f"{step}.hc"), name=f"{step}.h")
            return [h, c]

        y, (h, c) = _unroll(graph, node, k, 4, cell, [node.inputs[5], node.inputs[6]])
        ys.append(y)
        finals[0].append(h)
        finals[1].append(c)
    return _outputs(graph, node, ys, finals)
