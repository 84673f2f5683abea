"""Recurrent ops of ONNX, layout 0 (X is [seq, batch, input]; the frontend transposes
batch-major models): the simple RNN, the LSTM and GRU (references computed in float64;
lowering unrolls each over the static sequence into MatMuls and elementwise ops). RNN and
LSTM directions each have their own activations (by ONNX name, with alpha/beta), an optional
cell clip, optional per-batch sequence lengths (outputs past a batch's length are zero and
Y_h/Y_c hold its last valid step) and, for LSTM, peepholes."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.ops.elementwise import _sigmoid
from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import require_float, same_dtype
from ember.types import DType, TensorType

DIRECTIONS = ("forward", "reverse", "bidirectional")
# None of them is a primitive: compiled backends lower them (lowering/rnn.py); the 'oracle'
# trait keeps them whole on the interpreter, whose NumPy reference checks that lowering.
ORACLE = frozenset({"oracle"})


def _activation(name: str, alpha: float | None, beta: float | None):
    a, b = alpha, beta
    table = {
        "relu": lambda x: np.maximum(x, 0),
        "tanh": np.tanh,
        "sigmoid": _sigmoid,
        "affine": lambda x: (1.0 if a is None else a) * x + (0.0 if b is None else b),
        "leakyrelu": lambda x: np.where(x >= 0, x, (0.01 if a is None else a) * x),
        "thresholdedrelu": lambda x: np.where(x > (1.0 if a is None else a), x, 0),
        "scaledtanh": lambda x: (1.0 if a is None else a) * np.tanh((1.0 if b is None else b) * x),
        "hardsigmoid": lambda x: np.clip((0.2 if a is None else a) * x + (0.5 if b is None else b), 0, 1),
        "elu": lambda x: np.where(x >= 0, x, (1.0 if a is None else a) * np.expm1(np.minimum(x, 0))),
        "softsign": lambda x: x / (1 + np.abs(x)),
        "softplus": lambda x: np.logaddexp(0, x),
    }
    fn = table.get(name.lower())
    if fn is None:
        raise OpError(f"recurrent activation '{name}' is not one of {', '.join(sorted(table))}")
    return fn


@dataclass(frozen=True)
class RecurrentAttrs:
    """activations: names, `per_direction` of them for each direction in order; alphas and
    betas: one per activation (None: the activation's default)."""

    hidden_size: int
    direction: str = "forward"
    activations: tuple[str, ...] = ()
    alphas: tuple[float | None, ...] = ()
    betas: tuple[float | None, ...] = ()
    clip: float | None = None

    @property
    def num_directions(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    def functions(self, direction: int, count: int):
        names = self.activations[direction * count:(direction + 1) * count]
        alphas = (self.alphas or (None,) * len(self.activations))[direction * count:(direction + 1) * count]
        betas = (self.betas or (None,) * len(self.activations))[direction * count:(direction + 1) * count]
        return [_activation(n, a, b) for n, a, b in zip(names, alphas, betas, strict=False)]


def _infer(op: str, gates: int, states: int):
    def infer(attrs: RecurrentAttrs, types):
        x, w, r, b, lens, h0 = types[:6]
        require_float(x, op)
        if attrs.direction not in DIRECTIONS:
            raise OpError(f"{op} direction '{attrs.direction}' is not forward, reverse or bidirectional")
        d, h = attrs.num_directions, attrs.hidden_size
        if len(attrs.activations) != d * (1 if gates == 1 else 3):
            raise OpError(f"{op} needs {d * (1 if gates == 1 else 3)} activations, got {list(attrs.activations)}")
        for i in range(d):
            attrs.functions(i, len(attrs.activations) // d)  # validates the names
        if x.rank != 3:
            raise OpError(f"{op} input must be [seq, batch, input], got {x}")
        seq, batch, inp = x.shape
        expected = {"w": (w, (d, gates * h, inp)), "r": (r, (d, gates * h, h)), "b": (b, (d, 2 * gates * h)),
                    "initial_h": (h0, (d, batch, h))}
        if states == 2:
            expected["initial_c"] = (types[6], (d, batch, h))
            expected["p"] = (types[7], (d, 3 * h))
        for name, (t, shape) in expected.items():
            if t is not None and (t.shape != shape or t.dtype != x.dtype):
                raise OpError(f"{op} {name} must be {x.dtype}{list(shape)}, got {t}")
        if lens is not None and (lens.shape != (batch,) or lens.dtype not in (DType.INT32, DType.INT64)):
            raise OpError(f"{op} sequence_lens must be i32/i64 [{batch}], got {lens}")
        state = TensorType(x.dtype, (d, batch, h))
        return (TensorType(x.dtype, (seq, d, batch, h)),) + (state,) * states

    return infer


def _run(attrs: RecurrentAttrs, arrays, gates: int, step):
    """Runs `step(direction, x_t, states) -> states` over time for every direction; the
    first state is the hidden state H."""
    x, w, r, b, lens, h0 = arrays[:6]
    seq, batch, _ = x.shape
    d, h = attrs.num_directions, attrs.hidden_size
    x = x.astype(np.float64)
    lens = np.full(batch, seq) if lens is None else np.clip(lens.astype(np.int64), 0, seq)
    y = np.zeros((seq, d, batch, h))
    finals = []
    initial = [h0] + list(arrays[6:7])
    for k in range(d):
        reverse = attrs.direction == "reverse" or k == 1
        states = [np.zeros((batch, h)) if s is None else s[k].astype(np.float64) for s in initial]
        for t in range(seq):
            # A reverse run starts at each batch's own last valid step.
            active = t < lens
            index = np.where(active, (lens - 1 - t) if reverse else t, 0)
            new = step(k, x[index, np.arange(batch)], states)
            states = [np.where(active[:, None], n, s) for n, s in zip(new, states, strict=True)]
            y[index[active], k, np.arange(batch)[active]] = states[0][active]
        finals.append(states)
    dtype = arrays[0].dtype
    result = [y.astype(dtype)]
    for i in range(len(finals[0])):
        result.append(np.stack([f[i] for f in finals]).astype(dtype))
    return tuple(result)


def _clip(attrs: RecurrentAttrs, v: np.ndarray) -> np.ndarray:
    return v if attrs.clip is None else np.clip(v, -attrs.clip, attrs.clip)


def _rnn(attrs: RecurrentAttrs, arrays):
    x, w, r, b = arrays[:4]
    h = attrs.hidden_size
    b = np.zeros((attrs.num_directions, 2 * h)) if b is None else b.astype(np.float64)

    def step(k, x_t, states):
        (f,) = attrs.functions(k, 1)
        (h_prev,) = states
        pre = x_t @ w[k].astype(np.float64).T + h_prev @ r[k].astype(np.float64).T + b[k, :h] + b[k, h:]
        return [f(_clip(attrs, pre))]

    return _run(attrs, arrays, 1, step)


def _lstm(attrs: RecurrentAttrs, arrays):
    x, w, r, b, lens, h0, c0, p = arrays
    h = attrs.hidden_size
    d = attrs.num_directions
    b = np.zeros((d, 8 * h)) if b is None else b.astype(np.float64)
    p = np.zeros((d, 3 * h)) if p is None else p.astype(np.float64)

    def step(k, x_t, states):
        f, g, act_h = attrs.functions(k, 3)
        h_prev, c_prev = states
        gates = x_t @ w[k].astype(np.float64).T + h_prev @ r[k].astype(np.float64).T + b[k, :4 * h] + b[k, 4 * h:]
        i_g, o_g, f_g, c_g = (gates[:, j * h:(j + 1) * h] for j in range(4))
        p_i, p_o, p_f = (p[k, j * h:(j + 1) * h] for j in range(3))
        i_t = f(_clip(attrs, i_g + p_i * c_prev))
        f_t = f(_clip(attrs, f_g + p_f * c_prev))
        c_t = f_t * c_prev + i_t * g(_clip(attrs, c_g))
        o_t = f(_clip(attrs, o_g + p_o * c_t))
        return [o_t * act_h(c_t), c_t]

    return _run(attrs, [x, w, r, b, lens, h0, c0], 4, step)


define_op(OpDef("RNN", ("x", "w", "r", "b?", "sequence_lens?", "initial_h?"), ("y", "y_h"), _infer("RNN", 1, 1),
                _rnn, attrs=RecurrentAttrs, primitive=False, traits=ORACLE))
define_op(OpDef("LSTM", ("x", "w", "r", "b?", "sequence_lens?", "initial_h?", "initial_c?", "p?"),
                ("y", "y_h", "y_c"), _infer("LSTM", 4, 2), _lstm, attrs=RecurrentAttrs, primitive=False,
                traits=ORACLE))

__all__ = ["DIRECTIONS", "RecurrentAttrs"]


@dataclass(frozen=True)
class GRUAttrs:
    hidden_size: int
    direction: str = "forward"
    linear_before_reset: bool = False

    @property
    def num_directions(self) -> int:
        return 2 if self.direction == "bidirectional" else 1


def _gru_infer(attrs: GRUAttrs, types):
    x, w, r, b, h0 = types
    same_dtype(types, "GRU")
    require_float(x, "GRU")
    h, d = attrs.hidden_size, attrs.num_directions
    if attrs.direction not in ("forward", "reverse", "bidirectional"):
        raise OpError(f"GRU direction '{attrs.direction}' is not forward, reverse or bidirectional")
    if x.rank != 3:
        raise OpError(f"GRU input must be [seq, batch, input], got {x}")
    seq, batch, inp = x.shape
    expected = {"w": (w, (d, 3 * h, inp)), "r": (r, (d, 3 * h, h)), "b": (b, (d, 6 * h)),
                "initial_h": (h0, (d, batch, h))}
    for name, (t, shape) in expected.items():
        if t is not None and t.shape != shape:
            raise OpError(f"GRU {name} must have shape {list(shape)}, got {list(t.shape)}")
    return (x.with_shape((seq, d, batch, h)), x.with_shape((d, batch, h)))


def gru_step(x_proj: np.ndarray, h_prev: np.ndarray, r_weight: np.ndarray, r_bias: np.ndarray,
             w_bias: np.ndarray, linear_before_reset: bool) -> np.ndarray:
    """One GRU time step; x_proj = x_t @ W^T (gates z, r, h), weights for one direction."""
    hs = h_prev.shape[-1]
    xz, xr, xh = (x_proj[:, i * hs:(i + 1) * hs] + w_bias[i * hs:(i + 1) * hs] for i in range(3))
    rz, rr, rh = (r_weight[i * hs:(i + 1) * hs] for i in range(3))
    bz, br, bh = (r_bias[i * hs:(i + 1) * hs] for i in range(3))
    z = _sigmoid(xz + h_prev @ rz.T + bz)
    reset = _sigmoid(xr + h_prev @ rr.T + br)
    if linear_before_reset:
        candidate = np.tanh(xh + reset * (h_prev @ rh.T + bh))
    else:
        candidate = np.tanh(xh + (reset * h_prev) @ rh.T + bh)
    return (1 - z) * candidate + z * h_prev


def _gru(attrs: GRUAttrs, arrays):
    x, w, r = (a.astype(np.float64) for a in arrays[:3])
    b, h0 = (None if a is None else a.astype(np.float64) for a in arrays[3:])
    seq, batch, _ = x.shape
    h, d = attrs.hidden_size, attrs.num_directions
    b = np.zeros((d, 6 * h)) if b is None else b
    h0 = np.zeros((d, batch, h)) if h0 is None else h0
    y = np.zeros((seq, d, batch, h))
    for direction in range(d):
        reverse = attrs.direction == "reverse" or direction == 1
        steps = range(seq - 1, -1, -1) if reverse else range(seq)
        h_t = h0[direction]
        for t in steps:
            h_t = gru_step(x[t] @ w[direction].T, h_t, r[direction], b[direction, 3 * h:],
                           b[direction, :3 * h], attrs.linear_before_reset)
            y[t, direction] = h_t
    h_last = np.stack([y[-1 if not (attrs.direction == "reverse" or k == 1) else 0, k] for k in range(d)])
    dtype = arrays[0].dtype
    return (y.astype(dtype), h_last.astype(dtype))


define_op(OpDef("GRU", ("x", "w", "r", "b?", "initial_h?"), ("y", "y_h"), _gru_infer, _gru,
                attrs=GRUAttrs, primitive=False, traits=ORACLE))
