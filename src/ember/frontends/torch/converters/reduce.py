"""Reductions: sum, mean, prod, amax/amin, var, any/all, argmax/argmin and max/min over a
dimension (values and indices), in the type torch reduces in."""
from __future__ import annotations

from ember.frontends.torch.context import AtenContext
from ember.frontends.torch.registry import aten
from ember.graph.ir import Value
from ember.ops.reduce import ArgReduceAttrs, ReduceAttrs
from ember.ops.shape_util import normalize_axis
from ember.support.errors import UnsupportedOpError
from ember.types import DType


def _axes(ctx: AtenContext, x: Value, name: str = "dim") -> tuple[int, ...]:
    dims = ctx.ints(name) if ctx.args.get(name) is not None else ()
    if not dims:  # no dims: every axis
        return tuple(range(x.type.rank))
    return tuple(sorted({normalize_axis(d, x.type.rank) for d in dims}))


def _reduce(op: str):
    def convert(ctx: AtenContext) -> Value:
        x = ctx.tensor("self", ctx.out_dtype())
        axes = _axes(ctx, x)
        if not axes:
            return x
        return ctx.emit1(op, [x], ReduceAttrs(axes, bool(ctx.args.get("keepdim", False))))

    return convert


for _names, _op in ((("sum.dim_IntList",), "ReduceSum"), (("mean.dim", "mean.default"), "ReduceMean"),
                    (("prod.dim_int", "prod.default"), "ReduceProd"), (("amax.default",), "ReduceMax"),
                    (("amin.default",), "ReduceMin")):
    aten(*_names)(_reduce(_op))


@aten("var.correction")
def _var(ctx: AtenContext) -> Value:
    x = ctx.tensor("self", ctx.out_dtype())
    axes = _axes(ctx, x)
    keep = bool(ctx.args.get("keepdim", False))
    correction = ctx.number("correction", 1.0)
    mean = ctx.emit1("ReduceMean", [x], ReduceAttrs(axes, True))
    centered = ctx.emit1("Sub", [x, mean])
    squares = ctx.emit1("ReduceSumSquare", [centered], ReduceAttrs(axes, keep))
    count = 1
    for a in axes:
        count *= x.type.shape[a]
    return ctx.emit1("Div", [squares, ctx.value_of(max(count - float(correction or 0), 0.0))])


def _logical(op: str):
    def convert(ctx: AtenContext) -> Value:
        x = ctx.tensor("self")
        x = ctx.cast(ctx.emit1("Not", [ctx.emit1("Equal", [x, ctx.value_of(0, x.type.dtype)])]), DType.UINT8) \
            if x.type.dtype is not DType.BOOL else ctx.cast(x, DType.UINT8)
        axes = _axes(ctx, x)
        reduced = ctx.emit1(op, [x], ReduceAttrs(axes, bool(ctx.args.get("keepdim", False)))) if axes else x
        return ctx.cast(reduced, DType.BOOL)

    return convert


aten("any.dim", "any.dims", "any.default")(_logical("ReduceMax"))


def _arg(op: str):
    def convert(ctx: AtenContext) -> Value:
        x = ctx.tensor("self")
        if ctx["dim"] is None:
            x = ctx.reshape(x, (x.type.size,))
            axis, keep = 0, False
        else:
            axis, keep = normalize_axis(ctx.ints("dim")[0], x.type.rank), bool(ctx["keepdim"])
        result = ctx.emit1(op, [x], ArgReduceAttrs(axis, keep))
        return ctx.reshape(ctx.cast(result, DType.INT64), ctx.out_shape())

    return convert


aten("argmax.default")(_arg("ArgMax"))
aten("argmin.default")(_arg("ArgMin"))


def _value_and_index(reduce_op: str, arg_op: str):
    def convert(ctx: AtenContext) -> list[Value | None]:
        x = ctx.tensor("self")
        axis, keep = normalize_axis(ctx.ints("dim")[0], x.type.rank), bool(ctx["keepdim"])
        values = ctx.emit1(reduce_op, [x], ReduceAttrs((axis,), keep))
        indices = None
        if ctx.result_used(1):
            indices = ctx.cast(ctx.emit1(arg_op, [x], ArgReduceAttrs(axis, keep)), DType.INT64)
        return [values, indices]

    return convert


aten("max.dim")(_value_and_index("ReduceMax", "ArgMax"))
aten("min.dim")(_value_and_index("ReduceMin", "ArgMin"))


@aten("linalg_vector_norm.default")
def _vector_norm(ctx: AtenContext) -> Value:
    x = ctx.tensor("self", ctx.out_dtype())
    axes = _axes(ctx, x)
    keep = bool(ctx["keepdim"])
    order = ctx.number("ord", 2.0)
    if order == 2:
        return ctx.emit1("ReduceL2", [x], ReduceAttrs(axes, keep))
    if order == 1:
        return ctx.emit1("ReduceL1", [x], ReduceAttrs(axes, keep))
    if order == float("inf"):
        return ctx.emit1("ReduceMax", [ctx.emit1("Abs", [x])], ReduceAttrs(axes, keep))
    raise UnsupportedOpError(f"vector norms of order {order} are not supported (orders 1, 2 and inf are)")
