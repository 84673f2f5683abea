"""Recurrent ops. GRU follows ONNX (layout 0: X is [seq, batch, input]); it is not a
primitive: lowering unrolls it over the (static) sequence into MatMuls and elementwise ops."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.ops.elementwise import _sigmoid
from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import require_float, same_dtype


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
                attrs=GRUAttrs, primitive=False))
