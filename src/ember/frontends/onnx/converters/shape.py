"""Converters for ops that pass a value through or produce constants at import: Identity,
Dropout (inference), Constant, Shape, Size, ConstantOfShape and Range. Shapes are static,
so Shape and Size always fold, which lets the shape sub-graphs of exported models fold."""
from __future__ import annotations

import math

import numpy as np

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.support.errors import ImportError_, UnsupportedError


@converter("Identity")
def identity(ctx: NodeContext) -> Value:
    return ctx.require(0)


@converter("Dropout")
def dropout(ctx: NodeContext) -> list[Value | None]:
    x = ctx.require(0)
    if ctx.opset >= 12 and ctx.input(2) is not None:
        training = ctx.optional_constant(2, "training_mode")
        if training is not None and bool(np.any(training)):
            raise UnsupportedError("Dropout in training mode is not supported (Ember compiles inference)")
    ctx.check_unused(1, "the dropout mask")
    return [x, None]


@converter("Constant")
def constant(ctx: NodeContext) -> Value:
    if ctx.has_attr("sparse_value"):
        raise UnsupportedError("sparse constants (attribute 'sparse_value') are not supported")
    for name in ("value_string", "value_strings"):
        if ctx.has_attr(name):
            raise UnsupportedError(f"string constants (attribute '{name}') are not supported")
    if ctx.has_attr("value"):
        data = ctx.attr_tensor("value")
    elif ctx.has_attr("value_float"):
        data = np.array(ctx.attr_float("value_float"), dtype=np.float32)
    elif ctx.has_attr("value_floats"):
        data = np.array(ctx.attr_floats("value_floats"), dtype=np.float32)
    elif ctx.has_attr("value_int"):
        data = np.array(ctx.attr_int("value_int"), dtype=np.int64)
    elif ctx.has_attr("value_ints"):
        data = np.array(ctx.attr_ints("value_ints"), dtype=np.int64)
    else:
        raise ImportError_("has no value attribute")
    return ctx.constant_result(data)


def _clamp_dim_index(index: int, rank: int) -> int:
    if index < 0:
        index += rank
    return min(max(index, 0), rank)


@converter("Shape")
def shape(ctx: NodeContext) -> Value:
    dims = ctx.require(0).type.shape
    start, end = 0, len(dims)
    if ctx.opset >= 15:
        start = _clamp_dim_index(ctx.attr_int("start", 0), len(dims))
        end = _clamp_dim_index(ctx.attr_int("end", len(dims)), len(dims))
    return ctx.constant_result(np.array(dims[start:end], dtype=np.int64))


@converter("Size")
def size(ctx: NodeContext) -> Value:
    return ctx.constant_result(np.array(ctx.require(0).type.size, dtype=np.int64))


@converter("ConstantOfShape")
def constant_of_shape(ctx: NodeContext) -> Value:
    dims = ctx.constant_ints(0, "shape")
    if dims is None:
        raise ImportError_("required input 0 (shape) is missing")
    if any(d < 0 for d in dims):
        raise ImportError_(f"shape {list(dims)} has a negative dimension")
    value = ctx.attr_tensor("value", None)
    if value is None:
        value = np.zeros(1, dtype=np.float32)
    if value.size != 1:
        raise ImportError_(f"attribute 'value' must hold one element, got {value.size}")
    return ctx.constant_result(np.full(dims, value.reshape(-1)[0], dtype=value.dtype))


@converter("Range", min_opset=11)
def range_(ctx: NodeContext) -> Value:
    start, limit, delta = (ctx.constant(i, what) for i, what in enumerate(("start", "limit", "delta")))
    for what, data in (("start", start), ("limit", limit), ("delta", delta)):
        if data.size != 1:
            raise ImportError_(f"{what} must be a scalar, got shape {list(data.shape)}")
    dtype = start.dtype
    if dtype.kind in "iu":
        s, l, d = int(start.reshape(-1)[0]), int(limit.reshape(-1)[0]), int(delta.reshape(-1)[0])
        if d == 0:
            raise ImportError_("delta must not be zero")
        count = max(-((s - l) // d), 0)
        data = (s + np.arange(count, dtype=np.int64) * d).astype(dtype)
    elif dtype.kind == "f":
        s, l, d = float(start.reshape(-1)[0]), float(limit.reshape(-1)[0]), float(delta.reshape(-1)[0])
        if d == 0:
            raise ImportError_("delta must not be zero")
        count = max(math.ceil(float(limit.reshape(-1)[0] - start.reshape(-1)[0]) / d), 0)
        # Accumulate in the element type (value += delta), as ONNX Runtime does.
        steps = np.full(count, d, dtype=dtype)
        if count:
            steps[0] = s
        data = np.add.accumulate(steps, dtype=dtype)
    else:
        raise ImportError_(f"Range does not take {dtype} inputs")
    return ctx.constant_result(data)
