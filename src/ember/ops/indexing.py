"""Indexing and rearrangement ops: GatherElements, GatherND, ScatterElements, ScatterND,
Trilu, CumSum/CumProd, OneHot, TopK, DepthToSpace, SpaceToDepth and ReverseSequence.

Every output shape follows from the operand shapes and the attributes (TopK's k, OneHot's
depth are attributes), so all are static-shape primitives. Indices may be negative (counted
from the end, as ONNX allows); out-of-range indices are a run-time error."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import normalize_axis
from ember.ops.tensor import AxisAttrs
from ember.types import DType, TensorType

DATA_MOVEMENT = frozenset({"data_movement"})
INDEX_TYPES = (DType.INT32, DType.INT64)


def _check_indices(t: TensorType, op: str) -> None:
    if t.dtype not in INDEX_TYPES:
        raise OpError(f"{op} indices must be i32 or i64, got {t.dtype}")


def _wrap(indices: np.ndarray, size, op: str) -> np.ndarray:
    indices = indices.astype(np.int64)
    if np.any((indices < -size) | (indices >= size)):
        raise OpError(f"{op} index out of range for an axis of size {size}")
    return np.where(indices < 0, indices + size, indices)


def _gather_elements_infer(attrs: AxisAttrs, types):
    data, indices = types
    _check_indices(indices, "GatherElements")
    axis = normalize_axis(attrs.axis, data.rank)
    if indices.rank != data.rank or any(i > d for k, (i, d) in enumerate(zip(indices.shape, data.shape, strict=True))
                                        if k != axis):
        raise OpError(f"GatherElements indices {indices} must have the rank of data {data}, no larger off axis {axis}")
    return (data.with_shape(indices.shape),)


def _gather_elements(attrs: AxisAttrs, arrays):
    data, indices = arrays
    axis = normalize_axis(attrs.axis, data.ndim)
    # Indices may be smaller than data off the axis, so index explicitly (not take_along_axis).
    index = list(np.indices(indices.shape, sparse=True))
    index[axis] = _wrap(indices, data.shape[axis], "GatherElements")
    return (data[tuple(index)],)


define_op(OpDef("GatherElements", ("data", "indices"), ("y",), _gather_elements_infer, _gather_elements,
                attrs=AxisAttrs, traits=DATA_MOVEMENT))


@dataclass(frozen=True)
class GatherNDAttrs:
    batch_dims: int = 0


def _gather_nd_infer(attrs: GatherNDAttrs, types):
    data, indices = types
    _check_indices(indices, "GatherND")
    b = attrs.batch_dims
    if indices.rank < 1 or not 0 <= b < min(data.rank, indices.rank):
        raise OpError(f"GatherND batch_dims {b} does not fit data {data} and indices {indices}")
    depth = indices.shape[-1]
    if depth > data.rank - b or data.shape[:b] != indices.shape[:b]:
        raise OpError(f"GatherND indices {indices} do not index data {data} with batch_dims {b}")
    return (data.with_shape(indices.shape[:-1] + data.shape[b + depth:]),)


def _gather_nd(attrs: GatherNDAttrs, arrays):
    data, indices = arrays
    b = attrs.batch_dims
    depth = indices.shape[-1]
    batch = int(np.prod(data.shape[:b], dtype=np.int64))
    flat_data = data.reshape((batch,) + data.shape[b:])
    flat_idx = indices.reshape((batch, -1, depth))
    out = []
    for i in range(batch):
        idx = np.stack([_wrap(flat_idx[i, :, k], data.shape[b + k], "GatherND") for k in range(depth)])
        out.append(flat_data[i][tuple(idx)])
    shape = indices.shape[:-1] + data.shape[b + depth:]
    return (np.stack(out).reshape(shape) if out else np.zeros(shape, data.dtype),)


define_op(OpDef("GatherND", ("data", "indices"), ("y",), _gather_nd_infer, _gather_nd, attrs=GatherNDAttrs,
                traits=DATA_MOVEMENT))


REDUCTIONS = ("none", "add", "mul", "max", "min")
_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@dataclass(frozen=True)
class ScatterAttrs:
    axis: int = 0
    reduction: str = "none"


def _scatter_elements_infer(attrs: ScatterAttrs, types):
    data, indices, updates = types
    _check_indices(indices, "ScatterElements")
    normalize_axis(attrs.axis, data.rank)
    if attrs.reduction not in REDUCTIONS:
        raise OpError(f"ScatterElements reduction '{attrs.reduction}' is not one of {', '.join(REDUCTIONS)}")
    if indices.shape != updates.shape or indices.rank != data.rank or updates.dtype != data.dtype:
        raise OpError(f"ScatterElements indices {indices} and updates {updates} do not fit data {data}")
    return (data,)


def _scatter_elements(attrs: ScatterAttrs, arrays):
    data, indices, updates = arrays
    axis = normalize_axis(attrs.axis, data.ndim)
    out = data.copy()
    idx = list(np.indices(indices.shape, sparse=True))
    idx[axis] = _wrap(indices, data.shape[axis], "ScatterElements")
    if attrs.reduction == "none":
        out[tuple(idx)] = updates  # duplicates: the last one wins, as in ONNX's reference
    else:
        _UFUNCS[attrs.reduction].at(out, tuple(np.broadcast_arrays(*idx)), updates)
    return (out,)


define_op(OpDef("ScatterElements", ("data", "indices", "updates"), ("y",), _scatter_elements_infer,
                _scatter_elements, attrs=ScatterAttrs, traits=DATA_MOVEMENT))


@dataclass(frozen=True)
class ScatterNDAttrs:
    reduction: str = "none"


def _scatter_nd_infer(attrs: ScatterNDAttrs, types):
    data, indices, updates = types
    _check_indices(indices, "ScatterND")
    if attrs.reduction not in REDUCTIONS:
        raise OpError(f"ScatterND reduction '{attrs.reduction}' is not one of {', '.join(REDUCTIONS)}")
    depth = indices.shape[-1] if indices.rank else 0
    expected = indices.shape[:-1] + data.shape[depth:]
    if indices.rank < 1 or depth > data.rank or updates.shape != expected or updates.dtype != data.dtype:
        raise OpError(f"ScatterND updates {updates} must have shape {list(expected)} for data {data} "
                      f"and indices {indices}")
    return (data,)


def _scatter_nd(attrs: ScatterNDAttrs, arrays):
    data, indices, updates = arrays
    depth = indices.shape[-1]
    out = data.copy()
    flat_idx = indices.reshape(-1, depth)
    flat_upd = updates.reshape((flat_idx.shape[0],) + data.shape[depth:])
    for k in range(flat_idx.shape[0]):
        where = tuple(int(_wrap(flat_idx[k, j], data.shape[j], "ScatterND")) for j in range(depth))
        if attrs.reduction == "none":
            out[where] = flat_upd[k]
        else:
            out[where] = _UFUNCS[attrs.reduction](out[where], flat_upd[k])
    return (out,)


define_op(OpDef("ScatterND", ("data", "indices", "updates"), ("y",), _scatter_nd_infer, _scatter_nd,
                attrs=ScatterNDAttrs, traits=DATA_MOVEMENT))


@dataclass(frozen=True)
class TriluAttrs:
    upper: bool = True
    k: int = 0


def _trilu_infer(attrs: TriluAttrs, types):
    (t,) = types
    if t.rank < 2:
        raise OpError(f"Trilu needs rank >= 2, got {t}")
    return (t,)


def _trilu(attrs: TriluAttrs, arrays):
    (x,) = arrays
    return ((np.triu if attrs.upper else np.tril)(x, attrs.k),)


define_op(OpDef("Trilu", ("x",), ("y",), _trilu_infer, _trilu, attrs=TriluAttrs))


@dataclass(frozen=True)
class CumulativeAttrs:
    axis: int
    exclusive: bool = False
    reverse: bool = False


def _cumulative_infer(name):
    def infer(attrs: CumulativeAttrs, types):
        (t,) = types
        if t.dtype is DType.BOOL:
            raise OpError(f"{name} does not take bool")
        normalize_axis(attrs.axis, t.rank)
        return (t,)

    return infer


def _cumulative(fn, identity):
    def reference(attrs: CumulativeAttrs, arrays):
        (x,) = arrays
        axis = normalize_axis(attrs.axis, x.ndim)
        y = np.flip(x, axis) if attrs.reverse else x
        wide = y.astype(np.float64) if y.dtype.kind == "f" else y
        out = fn(wide, axis=axis)
        if attrs.exclusive:
            pad = [(0, 0)] * x.ndim
            pad[axis] = (1, 0)
            out = np.pad(out, pad, constant_values=identity)
            out = np.take(out, range(x.shape[axis]), axis=axis)
        if attrs.reverse:
            out = np.flip(out, axis)
        return (out.astype(x.dtype),)

    return reference


define_op(OpDef("CumSum", ("x",), ("y",), _cumulative_infer("CumSum"), _cumulative(np.cumsum, 0),
                attrs=CumulativeAttrs))
define_op(OpDef("CumProd", ("x",), ("y",), _cumulative_infer("CumProd"), _cumulative(np.cumprod, 1),
                attrs=CumulativeAttrs))


@dataclass(frozen=True)
class OneHotAttrs:
    """values = [off, on]; the one-hot axis of size `depth` is inserted at `axis` of the
    output (-1: last)."""

    depth: int
    axis: int = -1


def _one_hot_infer(attrs: OneHotAttrs, types):
    indices, values = types
    if values.size != 2:
        raise OpError(f"OneHot values must hold [off, on], got {values}")
    if attrs.depth < 0:
        raise OpError(f"OneHot depth must not be negative, got {attrs.depth}")
    rank = indices.rank + 1
    axis = normalize_axis(attrs.axis, rank)
    shape = indices.shape[:axis] + (attrs.depth,) + indices.shape[axis:]
    return (values.with_shape(shape),)


def _one_hot(attrs: OneHotAttrs, arrays):
    indices, values = arrays
    off, on = values.reshape(-1)
    idx = indices.astype(np.int64) if indices.dtype.kind in "iu" else np.trunc(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + attrs.depth, idx)
    axis = normalize_axis(attrs.axis, indices.ndim + 1)
    hot = np.expand_dims(idx, axis) == np.arange(attrs.depth).reshape(
        (1,) * axis + (attrs.depth,) + (1,) * (indices.ndim - axis))
    return (np.where(hot, on, off).astype(values.dtype),)


define_op(OpDef("OneHot", ("indices", "values"), ("y",), _one_hot_infer, _one_hot, attrs=OneHotAttrs))


@dataclass(frozen=True)
class TopKAttrs:
    k: int
    axis: int = -1
    largest: bool = True
    sorted: bool = True


def _topk_infer(attrs: TopKAttrs, types):
    (t,) = types
    axis = normalize_axis(attrs.axis, t.rank)
    if not 0 <= attrs.k <= t.shape[axis]:
        raise OpError(f"TopK k={attrs.k} does not fit an axis of size {t.shape[axis]}")
    shape = t.shape[:axis] + (attrs.k,) + t.shape[axis + 1:]
    return (t.with_shape(shape), TensorType(DType.INT64, shape))


def _topk(attrs: TopKAttrs, arrays):
    """Ties keep the lower index first, as ONNX specifies (stable sorts)."""
    (x,) = arrays
    axis = normalize_axis(attrs.axis, x.ndim)
    n = x.shape[axis]
    if attrs.largest:
        # Stable ascending sort of the reversed axis, reversed: descending, ties by index.
        order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
        order = n - 1 - order
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    indices = np.take(order, range(attrs.k), axis=axis)
    return (np.take_along_axis(x, indices, axis=axis), indices.astype(np.int64))


define_op(OpDef("TopK", ("x",), ("values", "indices"), _topk_infer, _topk, attrs=TopKAttrs))


@dataclass(frozen=True)
class BlockAttrs:
    """blocksize, and for DepthToSpace the channel order: DCR (depth, column, row) or CRD."""

    blocksize: int
    mode: str = "DCR"


def _depth_to_space_infer(attrs: BlockAttrs, types):
    (t,) = types
    b = attrs.blocksize
    if t.rank != 4 or b < 1 or t.shape[1] % (b * b) or attrs.mode not in ("DCR", "CRD"):
        raise OpError(f"DepthToSpace blocksize {b} (mode {attrs.mode}) does not fit {t}")
    n, c, h, w = t.shape
    return (t.with_shape((n, c // (b * b), h * b, w * b)),)


def _depth_to_space(attrs: BlockAttrs, arrays):
    (x,) = arrays
    n, c, h, w = x.shape
    b = attrs.blocksize
    if attrs.mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return (y.reshape(n, c // (b * b), h * b, w * b),)


def _space_to_depth_infer(attrs: BlockAttrs, types):
    (t,) = types
    b = attrs.blocksize
    if t.rank != 4 or b < 1 or t.shape[2] % b or t.shape[3] % b or attrs.mode not in ("DCR", "CRD"):
        raise OpError(f"SpaceToDepth blocksize {b} does not fit {t}")
    n, c, h, w = t.shape
    return (t.with_shape((n, c * b * b, h // b, w // b)),)


def _space_to_depth(attrs: BlockAttrs, arrays):
    (x,) = arrays
    n, c, h, w = x.shape
    b = attrs.blocksize
    perm = (0, 3, 5, 1, 2, 4) if attrs.mode == "DCR" else (0, 1, 3, 5, 2, 4)
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(perm)
    return (y.reshape(n, c * b * b, h // b, w // b),)


define_op(OpDef("DepthToSpace", ("x",), ("y",), _depth_to_space_infer, _depth_to_space, attrs=BlockAttrs,
                traits=DATA_MOVEMENT))
define_op(OpDef("SpaceToDepth", ("x",), ("y",), _space_to_depth_infer, _space_to_depth, attrs=BlockAttrs,
                traits=DATA_MOVEMENT))


@dataclass(frozen=True)
class ReverseSequenceAttrs:
    batch_axis: int = 1
    time_axis: int = 0


def _reverse_sequence_infer(attrs: ReverseSequenceAttrs, types):
    x, lens = types
    if x.rank < 2 or {attrs.batch_axis, attrs.time_axis} != {0, 1}:
        raise OpError(f"ReverseSequence needs batch and time axes 0 and 1 of an input of rank >= 2, got {x}")
    _check_indices(lens, "ReverseSequence")
    if lens.shape != (x.shape[attrs.batch_axis],):
        raise OpError(f"ReverseSequence sequence_lens {lens} must have one entry per batch")
    return (x,)


def _reverse_sequence(attrs: ReverseSequenceAttrs, arrays):
    x, lens = arrays
    y = x.copy()
    for b, length in enumerate(lens.astype(np.int64)):
        length = int(min(max(length, 0), x.shape[attrs.time_axis]))
        src: list[slice | int] = [slice(None)] * x.ndim
        src[attrs.batch_axis] = b
        src[attrs.time_axis] = slice(0, length)
        y[tuple(src)] = np.flip(x[tuple(src)], 0)
    return (y,)


define_op(OpDef("ReverseSequence", ("x", "sequence_lens"), ("y",), _reverse_sequence_infer, _reverse_sequence,
                attrs=ReverseSequenceAttrs, traits=DATA_MOVEMENT))

@dataclass(frozen=True)
class TensorScatterAttrs:
    """Writes `update` into a copy of the cache along `axis`, at write_indices[batch] (0 when
    absent); 'circular' wraps positions modulo the cache length."""

    axis: int = -2
    mode: str = "linear"


def _tensor_scatter_infer(attrs: TensorScatterAttrs, types):
    cache, update, indices = types
    axis = normalize_axis(attrs.axis, cache.rank)
    if attrs.mode not in ("linear", "circular"):
        raise OpError(f"TensorScatter mode '{attrs.mode}' is not linear or circular")
    if axis == 0 or update.rank != cache.rank or update.dtype != cache.dtype or any(
            u != c for i, (u, c) in enumerate(zip(update.shape, cache.shape, strict=True)) if i != axis) \
            or update.shape[axis] > cache.shape[axis]:
        raise OpError(f"TensorScatter update {update} does not fit cache {cache} along axis {axis}")
    if indices is not None:
        _check_indices(indices, "TensorScatter")
        if indices.shape != (cache.shape[0],):
            raise OpError(f"TensorScatter write_indices must be [{cache.shape[0]}], got {indices}")
    return (cache,)


def _tensor_scatter(attrs: TensorScatterAttrs, arrays):
    cache, update, indices = arrays
    axis = normalize_axis(attrs.axis, cache.ndim)
    out = cache.copy()
    length = cache.shape[axis]
    starts = np.zeros(cache.shape[0], np.int64) if indices is None else indices.astype(np.int64)
    for b in range(cache.shape[0]):
        positions = starts[b] + np.arange(update.shape[axis])
        if attrs.mode == "circular":
            positions = positions % length
        elif np.any(positions >= length) or np.any(positions < 0):
            raise OpError("TensorScatter writes past the end of the cache")
        target = np.moveaxis(out[b], axis - 1, 0)
        target[positions] = np.moveaxis(update[b], axis - 1, 0)
    return (out,)


define_op(OpDef("TensorScatter", ("past_cache", "update", "write_indices?"), ("present_cache",),
                _tensor_scatter_infer, _tensor_scatter, attrs=TensorScatterAttrs))

__all__ = ["BlockAttrs", "CumulativeAttrs", "GatherNDAttrs", "OneHotAttrs", "ReverseSequenceAttrs",
           "ScatterAttrs", "ScatterNDAttrs", "TensorScatterAttrs", "TopKAttrs", "TriluAttrs"]
