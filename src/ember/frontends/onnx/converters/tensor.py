"""Converters for shape and indexing ONNX ops: Reshape, Flatten, Squeeze, Unsqueeze,
Transpose, Concat, Slice, Gather, Expand, Pad and Tile. ONNX passes shapes, axes, starts and
pads as tensors (from some opset on); Ember needs them constant and resolves them here into
the static attributes of its ops (e.g. Slice bounds clamped exactly as ONNX specifies)."""
from __future__ import annotations

import math
from collections.abc import Sequence

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops.tensor import AxisAttrs, PadAttrs, ShapeAttrs, SliceAttrs, TileAttrs, TransposeAttrs
from ember.support.errors import ModelImportError


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """ONNX axis in [-rank, rank) to [0, rank)."""
    if not -rank <= axis < rank:
        raise ModelImportError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def normalize_axes(axes: Sequence[int], rank: int, what: str = "axes") -> tuple[int, ...]:
    out = tuple(normalize_axis(a, rank, what) for a in axes)
    if len(set(out)) != len(out):
        raise ModelImportError(f"{what} {list(axes)} repeat an axis")
    return out


def resolve_reshape(in_shape: Sequence[int], target: Sequence[int], allowzero: bool) -> tuple[int, ...]:
    """ONNX Reshape's shape input resolved: 0 copies the input dim (unless allowzero), one -1
    is inferred from the element count."""
    size = math.prod(in_shape)
    out: list[int] = []
    inferred = None
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ModelImportError(f"shape {list(target)} copies dimension {i} (0), but the input "
                                       f"{list(in_shape)} has rank {len(in_shape)}")
            out.append(in_shape[i])
        elif d == -1:
            if inferred is not None:
                raise ModelImportError(f"shape {list(target)} has more than one -1")
            inferred = i
            out.append(1)
        elif d < -1:
            raise ModelImportError(f"shape {list(target)} has an invalid dimension {d}")
        else:
            out.append(d)
    if inferred is not None:
        known = math.prod(out)
        if known == 0 or size % known:
            raise ModelImportError(f"cannot infer the -1 in shape {list(target)} for an input of shape "
                                   f"{list(in_shape)} ({size} elements)")
        out[inferred] = size // known
    if math.prod(out) != size:
        raise ModelImportError(f"cannot reshape {list(in_shape)} ({size} elements) to {list(target)} "
                               f"(resolved {out})")
    return tuple(out)


@converter("Reshape")
def reshape(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    target = ctx.constant_ints(1, "shape")
    if target is None:
        raise ModelImportError("required input 1 (shape) is missing")
    allowzero = ctx.opset >= 14 and ctx.attr_bool("allowzero", False)
    return ctx.reshape(x, resolve_reshape(x.type.shape, target, allowzero), final=True)


@converter("Flatten")
def flatten(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    rank = x.type.rank
    axis = ctx.attr_int("axis", 1)
    if not -rank <= axis <= rank:
        raise ModelImportError(f"axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    dims = x.type.shape
    return ctx.reshape(x, (math.prod(dims[:axis]), math.prod(dims[axis:])), final=True)


def _axes(ctx: NodeContext) -> tuple[int, ...] | None:
    """Squeeze/Unsqueeze axes: an attribute before opset 13, input 1 from 13."""
    if ctx.opset < 13:
        return ctx.attr_ints("axes", None)
    return ctx.constant_ints(1, "axes")


def _required_axes(ctx: NodeContext) -> tuple[int, ...]:
    axes = _axes(ctx)
    if axes is None:
        raise ModelImportError("axes are required")
    return axes


@converter("Squeeze")
def squeeze(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    dims = x.type.shape
    axes = _axes(ctx)
    if axes is None:
        keep = [d for d in dims if d != 1]
    else:
        axes = normalize_axes(axes, len(dims))
        for a in axes:
            if dims[a] != 1:
                raise ModelImportError(f"cannot squeeze axis {a} of shape {list(dims)}: its size is not 1")
        keep = [d for i, d in enumerate(dims) if i not in axes]
    return ctx.reshape(x, keep, final=True)


@converter("Unsqueeze")
def unsqueeze(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    axes = _required_axes(ctx)
    out_rank = x.type.rank + len(axes)
    axes = normalize_axes(axes, out_rank)
    rest = iter(x.type.shape)
    shape = [1 if i in axes else next(rest) for i in range(out_rank)]
    return ctx.reshape(x, shape, final=True)


@converter("Transpose")
def transpose(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    rank = x.type.rank
    perm = ctx.attr_ints("perm", None)
    perm = tuple(reversed(range(rank))) if perm is None else normalize_axes(perm, rank, "perm")
    if sorted(perm) != list(range(rank)):
        raise ModelImportError(f"perm {list(perm)} is not a permutation of {rank} axes")
    if perm == tuple(range(rank)):
        return x
    return ctx.result("Transpose", [x], TransposeAttrs(perm))[0]


@converter("Concat")
def concat(ctx: NodeContext) -> Value:
    values = [v for v in (ctx.input(i) for i in range(ctx.num_inputs)) if v is not None]
    if not values:
        raise ModelImportError("needs at least one input")
    axis = normalize_axis(ctx.attr_int("axis"), values[0].type.rank)
    if len(values) == 1:
        return values[0]
    return ctx.result("Concat", values, AxisAttrs(axis))[0]


def clamp_slice(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX Slice bounds for one axis, clamped so range(start, end, step) gives the kept
    indices (end is -1 when a negative step runs through index 0)."""
    if step == 0:
        raise ModelImportError("slice step must not be zero")
    if dim == 0:
        return 0, 0
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


@converter("Slice")
def slice_(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    rank = x.type.rank
    if ctx.opset < 10:
        given_starts: tuple[int, ...] | None = ctx.attr_ints("starts")
        given_ends: tuple[int, ...] | None = ctx.attr_ints("ends")
        given_axes, given_steps = ctx.attr_ints("axes", None), None
    else:
        given_starts, given_ends = ctx.constant_ints(1, "starts"), ctx.constant_ints(2, "ends")
        given_axes, given_steps = ctx.constant_ints(3, "axes"), ctx.constant_ints(4, "steps")
    if given_starts is None or given_ends is None:
        raise ModelImportError("inputs starts and ends are required")
    starts, ends = given_starts, given_ends
    axes = tuple(range(len(starts))) if given_axes is None else given_axes
    steps = (1,) * len(starts) if given_steps is None else given_steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ModelImportError(f"starts {list(starts)}, ends {list(ends)}, axes {list(axes)} and steps "
                               f"{list(steps)} differ in length")
    axes = normalize_axes(axes, rank)
    bounds = [clamp_slice(x.type.shape[a], s, e, st) for a, s, e, st in zip(axes, starts, ends, steps, strict=True)]
    if all(b == (0, x.type.shape[a]) and st == 1 for a, b, st in zip(axes, bounds, steps, strict=True)):
        return x
    attrs = SliceAttrs(axes, tuple(b[0] for b in bounds), tuple(b[1] for b in bounds), tuple(steps))
    return ctx.result("Slice", [x], attrs)[0]


@converter("Gather")
def gather(ctx: NodeContext) -> list[Value]:
    data, indices = ctx.require(0), ctx.require(1)
    axis = normalize_axis(ctx.attr_int("axis", 0), data.type.rank)
    return ctx.result("Gather", [data, indices], AxisAttrs(axis))


@converter("Expand")
def expand(ctx: NodeContext) -> list[Value]:
    shape = ctx.constant_ints(1, "shape")
    if shape is None:
        raise ModelImportError("required input 1 (shape) is missing")
    return ctx.result("Expand", [ctx.require(0)], ShapeAttrs(shape))


@converter("Pad")
def pad(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    rank = x.type.rank
    mode = ctx.attr_str("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ModelImportError(f"mode '{mode}' is not one of constant, reflect, edge, wrap")
    if ctx.opset < 11:
        pads: tuple[int, ...] = ctx.attr_ints("pads")
        value = ctx.attr_float("value", 0.0)
        axes = None
    else:
        given = ctx.constant_ints(1, "pads")
        if given is None:
            raise ModelImportError("required input 1 (pads) is missing")
        pads = given
        fill = ctx.optional_constant(2, "constant_value")
        if fill is not None and fill.size > 1:
            raise ModelImportError(f"constant_value must be a scalar, got shape {list(fill.shape)}")
        value = 0.0 if fill is None or fill.size == 0 else float(fill.reshape(-1)[0])
        axes = ctx.constant_ints(3, "axes") if ctx.opset >= 18 else None
    if axes is not None:
        axes = normalize_axes(axes, rank)
        if len(pads) != 2 * len(axes):
            raise ModelImportError(f"pads {list(pads)} need {2 * len(axes)} values for axes {list(axes)}")
        full = [0] * (2 * rank)
        for k, a in enumerate(axes):
            full[a], full[a + rank] = pads[k], pads[k + len(axes)]
        pads = tuple(full)
    if len(pads) != 2 * rank:
        raise ModelImportError(f"pads {list(pads)} need {2 * rank} values for an input of rank {rank}")
    if not any(pads):
        return x
    return ctx.result("Pad", [x], PadAttrs(tuple(pads), mode, value))[0]


@converter("Tile")
def tile(ctx: NodeContext) -> list[Value]:
    repeats = ctx.constant_ints(1, "repeats")
    if repeats is None:
        raise ModelImportError("required input 1 (repeats) is missing")
    return ctx.result("Tile", [ctx.require(0)], TileAttrs(repeats))
