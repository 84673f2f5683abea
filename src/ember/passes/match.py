"""Small matching helpers that rewrite patterns share: who produced a value, constant data
and splat (all-equal) constants, and channel vectors hidden in broadcast constants.

They only read the graph; building belongs to the Rewriter. Imports graph/ and below."""
from __future__ import annotations

import numpy as np

from ember.graph import Constant, Node, Value
from ember.ops.registry import OpError
from ember.ops.shape_util import broadcast_shapes
from ember.types import Shape


def producer(value: Value | None, *ops: str) -> Node | None:
    """The node computing `value` if its op is one of `ops` (any op when none are given)."""
    if value is None or value.producer is None:
        return None
    if ops and value.producer.op not in ops:
        return None
    return value.producer


def constant_data(value: Value | None) -> np.ndarray | None:
    return value.data if isinstance(value, Constant) else None


def splat_value(value: Value | None) -> float | None:
    """The number every element of a non-empty constant equals, or None."""
    data = constant_data(value)
    if data is None or data.size == 0:
        return None
    first = data.reshape(-1)[0]
    if not np.all(data == first):
        return None
    return float(first)


def is_splat(value: Value | None, number: float) -> bool:
    found = splat_value(value)
    return found is not None and found == number


def scalar_value(value: Value | None) -> float | None:
    """The number held by a one-element constant (any rank), or None."""
    data = constant_data(value)
    if data is None or data.size != 1:
        return None
    return float(data.reshape(-1)[0])


def close_to(found: float | None, expected: float, rtol: float = 1e-4) -> bool:
    """Constants in exported models are rounded to float32 (sqrt(2) is 1.4142135381698608),
    so recognizers compare with a relative tolerance."""
    return found is not None and abs(found - expected) <= rtol * abs(expected)


def broadcasts_into(small: Shape, big: Shape) -> bool:
    """Broadcasting `small` against `big` gives `big` (nothing grows)."""
    try:
        return broadcast_shapes(small, big) == tuple(big)
    except OpError:
        return False


def channel_vector(data: np.ndarray, out_shape: Shape, axis: int) -> np.ndarray | None:
    """If a constant broadcast against a tensor of `out_shape` varies at most along `axis`
    and does not grow the tensor, the vector of length out_shape[axis] it amounts to."""
    rank = len(out_shape)
    if data.ndim > rank or not broadcasts_into(data.shape, out_shape):
        return None
    padded = data.reshape((1,) * (rank - data.ndim) + data.shape)
    if any(d != 1 for i, d in enumerate(padded.shape) if i != axis):
        return None
    return np.broadcast_to(padded.reshape(-1), (out_shape[axis],)).copy()
