"""Data movement ops: Reshape, Transpose, Concat, Slice, Gather, Expand, Pad, Tile.

All shapes are static, so shape-like operands that ONNX passes as tensors are attributes
here (the frontend resolves them at import)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import broadcast_shapes, normalize_axis, product, same_dtype
from ember.types import DType, TensorType

DATA_MOVEMENT = frozenset({"data_movement"})


@dataclass(frozen=True)
class ReshapeAttrs:
    shape: tuple[int, ...]


def _reshape_infer(attrs: ReshapeAttrs, types):
    (t,) = types
    if any(d < 0 for d in attrs.shape) or product(attrs.shape) != t.size:
        raise OpError(f"cannot reshape {list(t.shape)} ({t.size} elements) to {list(attrs.shape)}")
    return (t.with_shape(attrs.shape),)


define_op(OpDef("Reshape", ("x",), ("y",), _reshape_infer,
                lambda a, xs: (xs[0].reshape(a.shape),), attrs=ReshapeAttrs, traits=DATA_MOVEMENT))


@dataclass(frozen=True)
class TransposeAttrs:
    perm: tuple[int, ...]


def _transpose_infer(attrs: TransposeAttrs, types):
    (t,) = types
    if sorted(attrs.perm) != list(range(t.rank)):
        raise OpError(f"perm {list(attrs.perm)} is not a permutation of the {t.rank} axes")
    return (t.with_shape(tuple(t.shape[p] for p in attrs.perm)),)


define_op(OpDef("Transpose", ("x",), ("y",), _transpose_infer,
                lambda a, xs: (np.transpose(xs[0], a.perm),), attrs=TransposeAttrs, traits=DATA_MOVEMENT))


@dataclass(frozen=True)
class AxisAttrs:
    axis: int = 0


def _concat_infer(attrs: AxisAttrs, types):
    dtype = same_dtype(types, "Concat")
    first = types[0]
    axis = normalize_axis(attrs.axis, first.rank)
    total = 0
    for t in types:
        if t.rank != first.rank or any(
            a != b for i, (a, b) in enumerate(zip(t.shape, first.shape, strict=True)) if i != axis
        ):
            raise OpError(f"Concat operands {list(first.shape)} and {list(t.shape)} differ off axis {axis}")
        total += t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return (TensorType(dtype, tuple(shape)),)


define_op(OpDef("Concat", ("inputs*",), ("y",), _concat_infer,
                lambda a, xs: (np.concatenate(xs, axis=a.axis),), attrs=AxisAttrs, traits=DATA_MOVEMENT))


@dataclass(frozen=True)
class SliceAttrs:
    """Normalized slice: one (start, stop, step) per listed axis, already clamped to the
    input so that range(start, stop, step) enumerates exactly the kept indices."""

    axes: tuple[int, ...]
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    steps: tuple[int, ...]


def _slice_index(attrs: SliceAttrs, rank: int) -> tuple[slice, ...]:
    index = [slice(None)] * rank
    for axis, start, end, step in zip(attrs.axes, attrs.starts, attrs.ends, attrs.steps, strict=True):
        index[axis] = slice(start, end if end >= 0 else None, step)
    return tuple(index)


def _slice_infer(attrs: SliceAttrs, types):
    (t,) = types
    if not (len(attrs.axes) == len(attrs.starts) == len(attrs.ends) == len(attrs.steps)):
        raise OpError("Slice axes, starts, ends and steps differ in length")
    shape = list(t.shape)
    for axis, start, end, step in zip(attrs.axes, attrs.starts, attrs.ends, attrs.steps, strict=True):
        if not 0 <= axis < t.rank or step == 0:
            raise OpError(f"bad Slice axis {axis} or step {step} for shape {list(t.shape)}")
        shape[axis] = len(range(start, end, step))
    return (t.with_shape(tuple(shape)),)


def _slice_reference(attrs: SliceAttrs, arrays):
    (x,) = arrays
    return (x[_slice_index(attrs, x.ndim)],)


define_op(OpDef("Slice", ("x",), ("y",), _slice_infer, _slice_reference, attrs=SliceAttrs,
                traits=DATA_MOVEMENT))


def _gather_infer(attrs: AxisAttrs, types):
    data, indices = types
    if indices.dtype not in (DType.INT32, DType.INT64):
        raise OpError(f"Gather indices must be i32 or i64, got {indices.dtype}")
    axis = normalize_axis(attrs.axis, data.rank)
    shape = data.shape[:axis] + indices.shape + data.shape[axis + 1:]
    return (data.with_shape(shape),)


def _gather_reference(attrs: AxisAttrs, arrays):
    data, indices = arrays
    axis = normalize_axis(attrs.axis, data.ndim)
    n = data.shape[axis]
    if np.any((indices < -n) | (indices >= n)):
        raise OpError(f"Gather index out of range [-{n}, {n})")
    return (np.take(data, np.where(indices < 0, indices + n, indices), axis=axis),)


define_op(OpDef("Gather", ("data", "indices"), ("y",), _gather_infer, _gather_reference, attrs=AxisAttrs,
                traits=DATA_MOVEMENT))


@dataclass(frozen=True)
class ShapeAttrs:
    shape: tuple[int, ...]


def _expand_infer(attrs: ShapeAttrs, types):
    (t,) = types
    if any(d < 0 for d in attrs.shape):
        raise OpError(f"Expand to shape {list(attrs.shape)}: dimensions must not be negative")
    shape = broadcast_shapes(t.shape, attrs.shape)
    return (t.with_shape(shape),)


def _expand_reference(attrs: ShapeAttrs, arrays):
    (x,) = arrays
    return (np.broadcast_to(x, broadcast_shapes(x.shape, attrs.shape)).copy(),)


define_op(OpDef("Expand", ("x",), ("y",), _expand_infer, _expand_reference, attrs=ShapeAttrs,
                traits=DATA_MOVEMENT))


@dataclass(frozen=True)
class PadAttrs:
    """pads: begin values for every axis, then end values (ONNX order); negative crops."""

    pads: tuple[int, ...]
    mode: str = "constant"
    value: float = 0.0


def _pad_infer(attrs: PadAttrs, types):
    (t,) = types
    if len(attrs.pads) != 2 * t.rank:
        raise OpError(f"Pad needs {2 * t.rank} pad values for rank {t.rank}, got {len(attrs.pads)}")
    if attrs.mode not in ("constant", "reflect", "edge", "wrap"):
        raise OpError(f"Pad mode '{attrs.mode}' is not one of constant, reflect, edge, wrap")
    shape = tuple(d + attrs.pads[i] + attrs.pads[i + t.rank] for i, d in enumerate(t.shape))
    if any(d < 0 for d in shape):
        raise OpError(f"Pad {list(attrs.pads)} crops {list(t.shape)} below zero")
    if attrs.mode != "constant":
        for i, d in enumerate(t.shape):
            begin, end = attrs.pads[i], attrs.pads[i + t.rank]
            if (begin > 0 or end > 0) and d - max(-begin, 0) - max(-end, 0) < 1:
                raise OpError(f"Pad mode '{attrs.mode}' pads axis {i}, which is empty after cropping "
                              f"({list(attrs.pads)} of {list(t.shape)}): there is nothing to repeat")
    return (t.with_shape(shape),)


def _pad_reference(attrs: PadAttrs, arrays):
    (x,) = arrays
    rank = x.ndim
    begins, ends = attrs.pads[:rank], attrs.pads[rank:]
    crop = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(begins, ends, strict=True)))
    x = x[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends, strict=True)]
    if attrs.mode == "constant":
        return (np.pad(x, widths, mode="constant", constant_values=np.asarray(attrs.value).astype(x.dtype)),)
    return (np.pad(x, widths, mode=attrs.mode),)  # type: ignore[call-overload]  # str mode, checked by _pad_infer


define_op(OpDef("Pad", ("x",), ("y",), _pad_infer, _pad_reference, attrs=PadAttrs, traits=DATA_MOVEMENT))


@dataclass(frozen=True)
class TileAttrs:
    repeats: tuple[int, ...]


def _tile_infer(attrs: TileAttrs, types):
    (t,) = types
    if len(attrs.repeats) != t.rank or any(r < 0 for r in attrs.repeats):
        raise OpError(f"Tile repeats {list(attrs.repeats)} do not fit rank {t.rank}")
    return (t.with_shape(tuple(d * r for d, r in zip(t.shape, attrs.repeats, strict=True))),)


define_op(OpDef("Tile", ("x",), ("y",), _tile_infer, lambda a, xs: (np.tile(xs[0], a.repeats),),
                attrs=TileAttrs, traits=DATA_MOVEMENT))
