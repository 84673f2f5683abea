"""Converters for dense and windowed ONNX ops: MatMul, Gemm, Conv, MaxPool, AveragePool,
GlobalAveragePool, GlobalMaxPool and BatchNormalization (inference form). Window attributes
are resolved here: auto_pad becomes explicit pads, defaults become explicit values."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops.conv import MaxPoolIndicesAttrs
from ember.ops.nn import BatchNormAttrs, ConvAttrs, GemmAttrs, PoolAttrs
from ember.ops.reduce import ReduceAttrs
from ember.support.errors import ModelImportError, UnsupportedError


@converter("MatMul")
def matmul(ctx: NodeContext) -> list[Value]:
    return ctx.result("MatMul", [ctx.require(0), ctx.require(1)])


@converter("Gemm")
def gemm(ctx: NodeContext) -> list[Value]:
    attrs = GemmAttrs(alpha=ctx.attr_float("alpha", 1.0), beta=ctx.attr_float("beta", 1.0),
                      transA=ctx.attr_bool("transA", False), transB=ctx.attr_bool("transB", False))
    return ctx.result("Gemm", [ctx.require(0), ctx.require(1), ctx.input(2)], attrs)


def same_pads(sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
              upper: bool) -> tuple[int, ...]:
    """Explicit pads (begins then ends) for auto_pad SAME_UPPER / SAME_LOWER: the output has
    ceil(size / stride) elements; an odd total pad puts the extra one at the end (UPPER) or
    the beginning (LOWER)."""
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
        out = math.ceil(size / s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begins.append(small if upper else large)
        ends.append(large if upper else small)
    return tuple(begins + ends)


def window_attrs(ctx: NodeContext, sizes: Sequence[int], kernel: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """(strides, pads, dilations) of a Conv/Pool node over spatial `sizes`."""
    n = len(kernel)
    strides = ctx.attr_ints("strides", None) or (1,) * n
    dilations = ctx.attr_ints("dilations", None) or (1,) * n
    if len(strides) != n or len(dilations) != n:
        raise ModelImportError(f"strides {list(strides)} and dilations {list(dilations)} must have one value per "
                               f"spatial axis ({n})")
    if any(v < 1 for v in (*kernel, *strides, *dilations)):  # before auto_pad divides by a stride
        raise ModelImportError(f"kernel {list(kernel)}, strides {list(strides)} and dilations {list(dilations)} "
                               "must be positive")
    auto_pad = ctx.attr_str("auto_pad", "NOTSET")
    if auto_pad == "NOTSET":
        pads = ctx.attr_ints("pads", None) or (0,) * (2 * n)
        if len(pads) != 2 * n:
            raise ModelImportError(f"pads {list(pads)} must have {2 * n} values (begins, then ends)")
    elif auto_pad == "VALID":
        pads = (0,) * (2 * n)
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = same_pads(sizes, kernel, strides, dilations, auto_pad == "SAME_UPPER")
    else:
        raise ModelImportError(f"auto_pad '{auto_pad}' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID")
    return tuple(strides), tuple(pads), tuple(dilations)


@converter("Conv")
def conv(ctx: NodeContext) -> list[Value]:
    x, w, b = ctx.require(0, "X"), ctx.require(1, "W"), ctx.input(2)
    if x.type.rank < 3 or w.type.rank != x.type.rank:
        raise ModelImportError(f"input {x.type} and weight {w.type} must have equal rank >= 3")
    kernel = w.type.shape[2:]
    declared = ctx.attr_ints("kernel_shape", None)
    if declared is not None and tuple(declared) != kernel:
        raise ModelImportError(f"kernel_shape {list(declared)} does not match the weight shape {list(w.type.shape)}")
    strides, pads, dilations = window_attrs(ctx, x.type.shape[2:], kernel)
    attrs = ConvAttrs(strides, pads, dilations, ctx.attr_int("group", 1))
    return ctx.result("Conv", [x, w, b], attrs)


def _pool_attrs(ctx: NodeContext, count_include_pad: bool) -> tuple[Value, PoolAttrs]:
    x = ctx.require(0)
    if x.type.rank < 3:
        raise ModelImportError(f"input {x.type} must have rank >= 3")
    kernel = ctx.attr_ints("kernel_shape")
    if len(kernel) != x.type.rank - 2:
        raise ModelImportError(f"kernel_shape {list(kernel)} does not match input {x.type}")
    strides, pads, dilations = window_attrs(ctx, x.type.shape[2:], kernel)
    return x, PoolAttrs(tuple(kernel), strides, pads, dilations, ctx.attr_bool("ceil_mode", False),
                        count_include_pad)


def _pool(ctx: NodeContext, op: str, count_include_pad: bool) -> list[Value]:
    x, attrs = _pool_attrs(ctx, count_include_pad)
    return ctx.result(op, [x], attrs)


@converter("MaxPool")
def max_pool(ctx: NodeContext) -> list[Value]:
    if not ctx.output_used(1):
        return _pool(ctx, "MaxPool", False)  # storage_order only affects Indices
    (pool,) = _pool_attrs(ctx, False)[1:]
    attrs = MaxPoolIndicesAttrs(pool.kernel, pool.strides, pool.pads, pool.dilations, pool.ceil_mode,
                                ctx.attr_bool("storage_order", False))
    return ctx.result("MaxPoolWithIndices", [ctx.require(0)], attrs)


@converter("AveragePool")
def average_pool(ctx: NodeContext) -> list[Value]:
    return _pool(ctx, "AveragePool", ctx.attr_bool("count_include_pad", False))


@converter("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ctx: NodeContext) -> list[Value]:
    x = ctx.require(0)
    if x.type.rank < 3:
        raise ModelImportError(f"input {x.type} must have rank >= 3")
    op = "ReduceMean" if ctx.op_type == "GlobalAveragePool" else "ReduceMax"
    return ctx.result(op, [x], ReduceAttrs(tuple(range(2, x.type.rank)), keepdims=True))


@converter("BatchNormalization")
def batch_norm(ctx: NodeContext) -> list[Value | None]:
    if ctx.opset < 9 and not ctx.attr_bool("spatial", True):
        raise UnsupportedError("spatial=0 (per-element statistics) is not supported")
    inputs = [ctx.require(i, what) for i, what in enumerate(("X", "scale", "B", "input_mean", "input_var"))]
    attrs = BatchNormAttrs(ctx.attr_float("epsilon", 1e-5))
    if ctx.opset >= 14 and ctx.attr_bool("training_mode", False):
        return _batch_norm_training(ctx, inputs, attrs)
    for i, what in ((1, "running mean"), (2, "running variance"), (3, "saved mean"), (4, "saved variance")):
        ctx.check_unused(i, f"the training-only {what} output")
    results: list[Value | None] = list(ctx.result("BatchNormalization", inputs, attrs))
    return results


def _batch_norm_training(ctx: NodeContext, inputs: list[Value], attrs: BatchNormAttrs) -> list[Value | None]:
    """Training mode: normalizes with the batch's mean and (biased) variance per channel and
    gives the updated running statistics, input * momentum + batch * (1 - momentum)."""
    x, scale, bias, mean, var = inputs
    if x.type.rank < 2:
        raise ModelImportError(f"X {x.type} has no channel axis (rank 2 or more: [N, C, ...])")
    for i in (3, 4):
        ctx.check_unused(i, "the saved statistics output")
    axes = ReduceAttrs(tuple(a for a in range(x.type.rank) if a != 1), keepdims=False)
    batch_mean = ctx.emit1("ReduceMean", [x], axes)
    channel_shape = (1, x.type.shape[1]) + (1,) * (x.type.rank - 2)
    centered = ctx.emit1("Sub", [x, ctx.reshape(batch_mean, channel_shape)])
    batch_var = ctx.emit1("ReduceMean", [ctx.emit1("Mul", [centered, centered])], axes)
    (y,) = ctx.result("BatchNormalization", [x, scale, bias, batch_mean, batch_var], attrs)
    momentum = ctx.attr_float("momentum", 0.9)
    dtype = mean.type.dtype.numpy
    keep = ctx.add_constant(np.asarray(momentum, dtype), f"{ctx.name}_momentum")
    take = ctx.add_constant(np.asarray(1.0 - momentum, dtype), f"{ctx.name}_one_minus_momentum")
    outputs: list[Value | None] = [y]
    for i, (running, batch) in enumerate(((mean, batch_mean), (var, batch_var)), start=1):
        if not ctx.output_used(i):
            outputs.append(None)
            continue
        mixed = ctx.emit1("Add", [ctx.emit1("Mul", [running, keep]), ctx.emit1("Mul", [batch, take])])
        outputs.append(mixed)
    return outputs
