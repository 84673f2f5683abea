"""Converters for ONNX indexing ops: GatherElements, GatherND, Scatter/ScatterElements,
ScatterND, TensorScatter, Trilu, CumSum, CumProd, OneHot, TopK, DepthToSpace, SpaceToDepth, ReverseSequence,
and the ops built from Slice/Pad/Gather at import: Split, CenterCropPad, Compress (constant
condition), EyeLike. NonZero, Unique and NonMaxSuppression have data-dependent output
shapes: they fold when their inputs are constant and are refused otherwise."""
from __future__ import annotations

import math

import numpy as np

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.converters.tensor import clamp_slice, normalize_axes, normalize_axis
from ember.frontends.onnx.dtypes import ONNX_TO_DTYPE, onnx_type_name
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops.indexing import (
    BlockAttrs,
    CumulativeAttrs,
    GatherNDAttrs,
    OneHotAttrs,
    ReverseSequenceAttrs,
    ScatterAttrs,
    ScatterNDAttrs,
    TensorScatterAttrs,
    TopKAttrs,
    TriluAttrs,
)
from ember.ops.tensor import AxisAttrs, PadAttrs, SliceAttrs
from ember.support.errors import ModelImportError, UnsupportedError


def data_dependent(ctx: NodeContext, i: int, what: str) -> np.ndarray:
    """Input i, whose values decide the output shape: it must be constant (then the node
    folds); otherwise the op is refused, since Ember compiles static shapes."""
    if ctx.input(i) is None or not ctx.is_constant(i):
        raise UnsupportedError(f"the output shape of {ctx.op_type} depends on the values of input {i} "
                               f"('{ctx.input_name(i)}', {what}), which are only known at run time; Ember "
                               "compiles static shapes, so it supports this op only on constant inputs")
    return ctx.constant(i, what)


@converter("GatherElements")
def gather_elements(ctx: NodeContext) -> list[Value]:
    data = ctx.require(0)
    axis = normalize_axis(ctx.attr_int("axis", 0), data.type.rank)
    return ctx.result("GatherElements", [data, ctx.require(1)], AxisAttrs(axis))


@converter("GatherND")
def gather_nd(ctx: NodeContext) -> list[Value]:
    return ctx.result("GatherND", [ctx.require(0), ctx.require(1)], GatherNDAttrs(ctx.attr_int("batch_dims", 0)))


@converter("ScatterElements", "Scatter")
def scatter_elements(ctx: NodeContext) -> list[Value]:
    data = ctx.require(0)
    axis = normalize_axis(ctx.attr_int("axis", 0), data.type.rank)
    reduction = ctx.attr_str("reduction", "none") if ctx.op_type == "ScatterElements" else "none"
    return ctx.result("ScatterElements", [data, ctx.require(1), ctx.require(2)], ScatterAttrs(axis, reduction))


@converter("ScatterND")
def scatter_nd(ctx: NodeContext) -> list[Value]:
    attrs = ScatterNDAttrs(ctx.attr_str("reduction", "none"))
    return ctx.result("ScatterND", [ctx.require(0), ctx.require(1), ctx.require(2)], attrs)


def _scalar_int(ctx: NodeContext, i: int, what: str, default: int | None = None) -> int:
    values = ctx.constant_ints(i, what)
    if values is None:
        if default is None:
            raise ModelImportError(f"required input {i} ({what}) is missing")
        return default
    if len(values) != 1:
        raise ModelImportError(f"input {i} ({what}) must hold one value, got {len(values)}")
    return values[0]


@converter("TensorScatter", min_opset=24)
def tensor_scatter(ctx: NodeContext) -> list[Value]:
    attrs = TensorScatterAttrs(ctx.attr_int("axis", -2), ctx.attr_str("mode", "linear"))
    return ctx.result("TensorScatter", [ctx.require(0), ctx.require(1), ctx.input(2)], attrs)


@converter("Trilu", min_opset=14)
def trilu(ctx: NodeContext) -> list[Value]:
    x = ctx.require(0)
    k = _scalar_int(ctx, 1, "k", 0)
    if x.type.rank >= 2:  # beyond [-rows, cols] every k keeps the same elements; no overflow later
        k = max(-x.type.shape[-2], min(k, x.type.shape[-1]))
    attrs = TriluAttrs(ctx.attr_bool("upper", True), k)
    return ctx.result("Trilu", [x], attrs)


@converter("CumSum", "CumProd")
def cumulative(ctx: NodeContext) -> list[Value]:
    x = ctx.require(0)
    axis = normalize_axis(_scalar_int(ctx, 1, "axis"), x.type.rank)
    attrs = CumulativeAttrs(axis, ctx.attr_bool("exclusive", False), ctx.attr_bool("reverse", False))
    return ctx.result(ctx.op_type, [x], attrs)


@converter("OneHot")
def one_hot(ctx: NodeContext) -> list[Value]:
    depth = ctx.constant(1, "depth")
    if depth.size != 1:
        raise ModelImportError(f"depth must hold one value, got shape {list(depth.shape)}")
    value = depth.reshape(-1)[0]
    if depth.dtype.kind == "f" and not np.isfinite(value):
        raise ModelImportError(f"depth must be a finite number, got {value}")
    attrs = OneHotAttrs(int(value), ctx.attr_int("axis", -1))
    return ctx.result("OneHot", [ctx.require(0), ctx.require(2, "values")], attrs)


@converter("TopK")
def top_k(ctx: NodeContext) -> list[Value]:
    x = ctx.require(0)
    k = ctx.attr_int("k") if ctx.opset < 10 else _scalar_int(ctx, 1, "K")
    attrs = TopKAttrs(k, normalize_axis(ctx.attr_int("axis", -1), x.type.rank),
                      ctx.attr_bool("largest", True), ctx.attr_bool("sorted", True))
    return ctx.result("TopK", [x], attrs)


@converter("DepthToSpace")
def depth_to_space(ctx: NodeContext) -> list[Value]:
    attrs = BlockAttrs(ctx.attr_int("blocksize"), ctx.attr_str("mode", "DCR"))
    return ctx.result("DepthToSpace", [ctx.require(0)], attrs)


@converter("SpaceToDepth")
def space_to_depth(ctx: NodeContext) -> list[Value]:
    attrs = BlockAttrs(ctx.attr_int("blocksize"), ctx.attr_str("mode", "DCR"))
    return ctx.result("SpaceToDepth", [ctx.require(0)], attrs)


@converter("ReverseSequence")
def reverse_sequence(ctx: NodeContext) -> list[Value]:
    attrs = ReverseSequenceAttrs(ctx.attr_int("batch_axis", 1), ctx.attr_int("time_axis", 0))
    return ctx.result("ReverseSequence", [ctx.require(0), ctx.require(1)], attrs)


def _slice(ctx: NodeContext, x: Value, axis: int, start: int, end: int, name: str | None = None) -> Value:
    if (start, end) == (0, x.type.shape[axis]):
        return x
    attrs = SliceAttrs((axis,), (start,), (end,), (1,))
    if name is not None:
        return ctx.emit("Slice", [x], attrs, [name])[0]
    return ctx.emit1("Slice", [x], attrs)


@converter("Split")
def split(ctx: NodeContext) -> list[Value]:
    x = ctx.require(0)
    axis = normalize_axis(ctx.attr_int("axis", 0), x.type.rank)
    dim = x.type.shape[axis]
    sizes = ctx.attr_ints("split", None) if ctx.opset < 13 else ctx.constant_ints(1, "split")
    count = ctx.num_outputs
    if sizes is None:
        if ctx.opset >= 18 and ctx.has_attr("num_outputs"):
            count = ctx.attr_int("num_outputs")
            if count != ctx.num_outputs:  # checked first: a huge count must not size a tuple
                raise ModelImportError(f"num_outputs is {count}, but the node has {ctx.num_outputs} outputs")
            chunk = math.ceil(dim / count)
            sizes = tuple(min(chunk, max(dim - i * chunk, 0)) for i in range(count))
        else:
            if count < 1:
                raise ModelImportError("Split has no outputs")
            if dim % count:
                raise ModelImportError(f"cannot split an axis of {dim} into {count} equal parts")
            sizes = (dim // count,) * count
    if sum(sizes) != dim or len(sizes) != ctx.num_outputs:
        raise ModelImportError(f"split sizes {list(sizes)} do not cover the axis of {dim} with "
                               f"{ctx.num_outputs} outputs")
    outputs, start = [], 0
    for i, size in enumerate(sizes):
        outputs.append(_slice(ctx, x, axis, start, start + size, ctx.output_name(i) or None))
        start += size
    return outputs


@converter("CenterCropPad", min_opset=18)
def center_crop_pad(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    rank = x.type.rank
    shape = ctx.constant_ints(1, "shape")
    if shape is None:
        raise ModelImportError("required input 1 (shape) is missing")
    given_axes = ctx.attr_ints("axes", None)
    axes = tuple(range(rank)) if given_axes is None else normalize_axes(given_axes, rank)
    if len(shape) != len(axes):
        raise ModelImportError(f"shape {list(shape)} needs one value per axis {list(axes)}")
    if any(size < 0 for size in shape):
        raise ModelImportError(f"shape {list(shape)} must not be negative")
    y, pads = x, [0] * (2 * rank)
    for axis, size in zip(axes, shape, strict=True):
        dim = x.type.shape[axis]
        if size < dim:  # crop, the odd element off the end
            begin = (dim - size) // 2
            y = _slice(ctx, y, axis, begin, begin + size)
        elif size > dim:  # pad, the odd element at the end
            pads[axis] = (size - dim) // 2
            pads[axis + rank] = size - dim - pads[axis]
    if any(pads):
        y = ctx.emit1("Pad", [y], PadAttrs(tuple(pads), "constant", 0.0))
    return y


@converter("Compress")
def compress(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    condition = data_dependent(ctx, 1, "condition").astype(bool).reshape(-1)
    axis = ctx.attr_int("axis", None)
    if axis is None:
        x = ctx.reshape(x, (x.type.size,))
        axis = 0
    axis = normalize_axis(axis, x.type.rank)
    kept = np.nonzero(condition[:x.type.shape[axis]])[0].astype(np.int64)
    indices = ctx.add_constant(kept, f"{ctx.name}_indices")
    return ctx.result("Gather", [x, indices], AxisAttrs(axis))[0]


@converter("NonZero")
def non_zero(ctx: NodeContext) -> Value:
    data = data_dependent(ctx, 0, "X")
    # A scalar counts as one element of a 1-D tensor, as in ONNX Runtime (the result is [1, n];
    # NumPy refuses nonzero on 0-d arrays).
    data = np.atleast_1d(data)
    return ctx.constant_result(np.array(np.nonzero(data), dtype=np.int64).reshape(data.ndim, -1))


@converter("Unique")
def unique(ctx: NodeContext) -> list[Value]:
    data = data_dependent(ctx, 0, "X")
    axis = ctx.attr_int("axis", None)
    if axis is not None:
        axis = normalize_axis(axis, data.ndim)
    values, first, inverse, counts = np.unique(data, return_index=True, return_inverse=True,
                                               return_counts=True, axis=axis)
    if not ctx.attr_bool("sorted", True):
        order = np.argsort(first, kind="stable")
        values = np.take(values, order, axis=0 if axis is None else axis)
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        first, counts, inverse = first[order], counts[order], rank[inverse.reshape(-1)]
    results = [values, first, inverse.reshape(-1), counts]
    return [ctx.constant_result(np.asarray(r) if i == 0 else np.asarray(r, np.int64), i)
            for i, r in enumerate(results)]


@converter("EyeLike")
def eye_like(ctx: NodeContext) -> Value:
    x = ctx.require(0)
    if x.type.rank != 2:
        raise ModelImportError(f"input {x.type} must be 2-D")
    dtype = x.type.dtype
    if ctx.has_attr("dtype"):
        to = ctx.attr_int("dtype")
        if to not in ONNX_TO_DTYPE:
            raise UnsupportedError(f"dtype {onnx_type_name(to)} is not supported")
        dtype = ONNX_TO_DTYPE[to]
    rows, cols = x.type.shape
    return ctx.constant_result(np.eye(rows, cols, ctx.attr_int("k", 0), dtype=dtype.numpy))


__all__ = ["clamp_slice", "data_dependent"]


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """[..., 4] boxes as (y1, x1, y2, x2) with y1 <= y2, x1 <= x2."""
    if center_point_box:
        xc, yc, w, h = np.moveaxis(boxes, -1, 0)
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    y1, x1, y2, x2 = np.moveaxis(boxes, -1, 0)
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=-1)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    height = min(a[2], b[2]) - max(a[0], b[0])
    width = min(a[3], b[3]) - max(a[1], b[1])
    if height <= 0 or width <= 0:
        return 0.0
    inter = height * width
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@converter("NonMaxSuppression")
def non_max_suppression(ctx: NodeContext) -> Value:
    """Folds when boxes and scores are constant: greedy selection per batch and class, by
    score (ties to the lower index), dropping boxes whose IoU with a kept one exceeds the
    threshold. Otherwise the number of kept boxes (the output shape) is run-time data."""
    boxes = data_dependent(ctx, 0, "boxes").astype(np.float64)
    scores = data_dependent(ctx, 1, "scores").astype(np.float64)
    limits = ctx.constant_ints(2, "max_output_boxes_per_class") if ctx.input(2) is not None else None
    iou_given = ctx.optional_constant(3, "iou_threshold")
    threshold = ctx.optional_constant(4, "score_threshold")
    limit = limits[0] if limits else 0
    if boxes.ndim != 3 or boxes.shape[-1] != 4 or scores.ndim != 3 or scores.shape[0] != boxes.shape[0] \
            or scores.shape[2] != boxes.shape[1]:
        raise ModelImportError(f"boxes {list(boxes.shape)} must be [batch, boxes, 4] and scores {list(scores.shape)} "
                               "[batch, classes, boxes] of the same batch and boxes")
    iou = float(iou_given.reshape(-1)[0]) if iou_given is not None and iou_given.size else 0.0
    corners = _corners(boxes, ctx.attr_bool("center_point_box", False))
    selected = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = [i for i in np.argsort(-s, kind="stable")
                     if threshold is None or threshold.size == 0 or s[i] > float(threshold.reshape(-1)[0])]
            kept: list[int] = []
            for i in order:
                if len(kept) >= limit:
                    break
                if all(_iou(corners[b, i], corners[b, j]) <= iou for j in kept):
                    kept.append(i)
                    selected.append((b, c, i))
    return ctx.constant_result(np.array(selected, dtype=np.int64).reshape(-1, 3))
