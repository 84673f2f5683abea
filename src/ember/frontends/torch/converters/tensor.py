"""Shape, layout and indexing ATen ops: views (which copy in Ember's value semantics: the
exported program is functional), permutes, slicing, concatenation, splitting, padding,
gathers and the tensor factories (full, arange...), which fold to constants."""
from __future__ import annotations

import numpy as np
import torch

from ember.frontends.torch.context import AtenContext
from ember.frontends.torch.dtypes import tensor_to_array
from ember.frontends.torch.registry import aten
from ember.graph.ir import Value
from ember.ops.indexing import CumulativeAttrs, GatherNDAttrs, TopKAttrs, TriluAttrs
from ember.ops.shape_util import normalize_axis
from ember.ops.tensor import AxisAttrs, PadAttrs, ShapeAttrs, SliceAttrs, TileAttrs, TransposeAttrs
from ember.support.errors import UnsupportedOpError
from ember.types import DType


@aten("view.default", "squeeze.dims", "unsqueeze.default")
def _reshape(ctx: AtenContext) -> Value:
    return ctx.reshape(ctx.tensor("self"), ctx.out_shape())


@aten("permute.default")
def _permute(ctx: AtenContext) -> Value:
    x = ctx.tensor("self")
    perm = tuple(normalize_axis(d, x.type.rank) for d in ctx.ints("dims"))
    return x if perm == tuple(range(x.type.rank)) else ctx.emit1("Transpose", [x], TransposeAttrs(perm))


@aten("expand.default")
def _expand(ctx: AtenContext) -> Value:
    x = ctx.tensor("self")
    shape = ctx.out_shape()
    return x if x.type.shape == shape else ctx.emit1("Expand", [x], ShapeAttrs(shape))


@aten("cat.default")
def _cat(ctx: AtenContext) -> Value:
    dtype = ctx.out_dtype()
    rank = len(ctx.out_shape())
    # torch still accepts 1-D empty tensors beside tensors of any rank.
    values = [ctx.value_of(t, dtype) for t in ctx["tensors"]]
    values = [v for v in values if not (v.type.rank == 1 and v.type.shape[0] == 0 and rank != 1)]
    if len(values) == 1:
        return values[0]
    return ctx.emit1("Concat", values, AxisAttrs(normalize_axis(ctx.ints("dim")[0], rank)))


def slice_axis(ctx: AtenContext, x: Value, axis: int, start: int, end: int, step: int = 1) -> Value:
    size = x.type.shape[axis]
    begin, stop, stride = slice(start, end, step).indices(size)
    if (begin, stop, stride) == (0, size, 1):
        return x
    return ctx.emit1("Slice", [x], SliceAttrs((axis,), (begin,), (stop,), (stride,)))


@aten("slice.Tensor")
def _slice(ctx: AtenContext) -> Value:
    x = ctx.tensor("self")
    axis = normalize_axis(ctx.ints("dim")[0], x.type.rank)
    start = ctx["start"] if ctx["start"] is not None else 0
    end = ctx["end"] if ctx["end"] is not None else x.type.shape[axis]
    return slice_axis(ctx, x, axis, int(start), int(end), ctx.ints("step")[0])


@aten("select.int")
def _select(ctx: AtenContext) -> Value:
    x = ctx.tensor("self")
    axis = normalize_axis(ctx.ints("dim")[0], x.type.rank)
    index = ctx.ints("index")[0]
    index = index + x.type.shape[axis] if index < 0 else index
    return ctx.reshape(slice_axis(ctx, x, axis, index, index + 1), ctx.out_shape())


@aten("split_with_sizes.default")
def _split(ctx: AtenContext) -> list[Value | None]:
    x = ctx.tensor("self")
    axis = normalize_axis(ctx.ints("dim")[0], x.type.rank)
    results: list[Value | None] = []
    start = 0
    for i, meta in enumerate(ctx.node.meta["val"]):
        size = int(meta.shape[axis]) if len(meta.shape) == x.type.rank else 1
        if ctx.result_used(i):
            part = slice_axis(ctx, x, axis, start, start + size)
            results.append(ctx.reshape(part, tuple(int(d) for d in meta.shape)))
        else:
            results.append(None)
        start += size
    return results


@aten("flip.default")
def _flip(ctx: AtenContext) -> Value:
    x = ctx.tensor("self")
    axes = tuple(sorted({normalize_axis(d, x.type.rank) for d in ctx.ints("dims")}))
    starts = tuple(x.type.shape[a] - 1 for a in axes)
    return ctx.emit1("Slice", [x], SliceAttrs(axes, starts, (-1,) * len(axes), (-1,) * len(axes)))


def _torch_pads(pad: tuple[int, ...], rank: int) -> tuple[int, ...]:
    """torch's (last-axis begin, end, next-to-last begin, end, ...) as ONNX begins then ends."""
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    return tuple(begins + ends)


@aten("constant_pad_nd.default")
def _constant_pad(ctx: AtenContext) -> Value:
    x = ctx.tensor("self")
    return ctx.emit1("Pad", [x], PadAttrs(_torch_pads(ctx.ints("pad"), x.type.rank), "constant",
                                          float(ctx.number("value", 0.0) or 0.0)))


def _mode_pad(mode: str):
    def convert(ctx: AtenContext) -> Value:
        x = ctx.tensor("self")
        return ctx.emit1("Pad", [x], PadAttrs(_torch_pads(ctx.ints("padding"), x.type.rank), mode))

    return convert


for _rank in (1, 2, 3):
    aten(f"reflection_pad{_rank}d.default")(_mode_pad("reflect"))
    aten(f"replication_pad{_rank}d.default")(_mode_pad("edge"))


@aten("index_select.default")
def _index_select(ctx: AtenContext) -> Value:
    x = ctx.tensor("self")
    return ctx.emit1("Gather", [x, ctx.tensor("index")], AxisAttrs(normalize_axis(ctx.ints("dim")[0], x.type.rank)))


@aten("gather.default")
def _gather(ctx: AtenContext) -> Value:
    x = ctx.tensor("self")
    return ctx.emit1("GatherElements", [x, ctx.tensor("index")],
                     AxisAttrs(normalize_axis(ctx.ints("dim")[0], x.type.rank)))


@aten("index.Tensor")
def _index(ctx: AtenContext) -> Value:
    """Advanced indexing by integer tensors: one index tensor is a Gather on its axis; several
    on the leading axes are a GatherND of their broadcast, stacked. Boolean masks select a
    data-dependent number of elements and are refused."""
    x = ctx.tensor("self")
    indices = list(ctx["indices"])
    present = [i for i, t in enumerate(indices) if t is not None]
    values = [ctx.value_of(indices[i]) for i in present]
    if any(v.type.dtype is DType.BOOL or v.type.dtype is DType.UINT8 for v in values):
        raise UnsupportedOpError("indexing by a boolean mask selects a data-dependent number of elements; "
                                 "Ember compiles static shapes (use torch.where)")
    values = [ctx.cast(v, DType.INT64) for v in values]
    if len(values) == 1:
        return ctx.emit1("Gather", [x, values[0]], AxisAttrs(present[0]))
    if present != list(range(len(present))):
        raise UnsupportedOpError(f"indexing by tensors on axes {present} (not the leading axes) is not supported")
    shape = np.broadcast_shapes(*(v.type.shape for v in values))
    columns = []
    for v in values:
        v = v if v.type.shape == shape else ctx.emit1("Expand", [v], ShapeAttrs(tuple(shape)))
        columns.append(ctx.reshape(v, tuple(shape) + (1,)))
    stacked = ctx.emit1("Concat", columns, AxisAttrs(len(shape)))
    return ctx.emit1("GatherND", [x, stacked], GatherNDAttrs(0))


@aten("repeat.default")
def _repeat(ctx: AtenContext) -> Value:
    x = ctx.tensor("self")
    repeats = ctx.ints("repeats")
    x = ctx.reshape(x, (1,) * (len(repeats) - x.type.rank) + x.type.shape)
    return ctx.emit1("Tile", [x], TileAttrs(repeats))


@aten("cumsum.default")
def _cumsum(ctx: AtenContext) -> Value:
    x = ctx.tensor("self", ctx.out_dtype())
    return ctx.emit1("CumSum", [x], CumulativeAttrs(normalize_axis(ctx.ints("dim")[0], x.type.rank)))


@aten("triu.default", "tril.default")
def _trilu(ctx: AtenContext) -> Value:
    upper = ctx.op.startswith("aten.triu")
    return ctx.emit1("Trilu", [ctx.tensor("self")], TriluAttrs(upper, ctx.ints("diagonal")[0]))


@aten("topk.default")
def _topk(ctx: AtenContext) -> list[Value | None]:
    x = ctx.tensor("self")
    attrs = TopKAttrs(ctx.ints("k")[0], normalize_axis(ctx.ints("dim")[0], x.type.rank), bool(ctx["largest"]), True)
    values, indices = ctx.emit("TopK", [x], attrs)
    return [values, ctx.cast(indices, DType.INT64)]


@aten("sort.default")
def _sort(ctx: AtenContext) -> list[Value | None]:
    """A full TopK: equal values may come in another order than torch's (which is unstable
    too, unless stable=True, which is another overload)."""
    x = ctx.tensor("self")
    axis = normalize_axis(ctx.ints("dim")[0], x.type.rank)
    values, indices = ctx.emit("TopK", [x], TopKAttrs(x.type.shape[axis], axis, bool(ctx["descending"]), True))
    return [values, ctx.cast(indices, DType.INT64) if ctx.result_used(1) else None]


# tensor factories: constants -----------------------------------------------------------------


def _factory_dtype(ctx: AtenContext) -> np.dtype:
    return ctx.out_dtype().numpy


@aten("full.default", "full_like.default")
def _full(ctx: AtenContext) -> Value:
    return ctx.constant(np.full(ctx.out_shape(), ctx["fill_value"], dtype=_factory_dtype(ctx)))


@aten("empty.memory_format")
def _zeros(ctx: AtenContext) -> Value:
    # empty's contents are unspecified: zeros are one valid choice, and deterministic.
    return ctx.constant(np.zeros(ctx.out_shape(), dtype=_factory_dtype(ctx)))


@aten("scalar_tensor.default")
def _scalar_tensor(ctx: AtenContext) -> Value:
    return ctx.constant(np.array(ctx["s"], dtype=_factory_dtype(ctx)))


@aten("arange.start_step")
def _arange(ctx: AtenContext) -> Value:
    # torch computes the values; reproducing its rounding of float steps is not worth a risk.
    start = ctx.args.get("start", 0)
    step = ctx.args.get("step", 1)
    values = torch.arange(start, ctx["end"], step, dtype=ctx.out_meta().dtype)
    return ctx.constant(tensor_to_array(values, ctx.op))
