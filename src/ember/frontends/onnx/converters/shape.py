"""Converters for ops that pass a value through or produce constants at import: Identity,
Dropout (inference), Constant, Shape, Size, ConstantOfShape, Range and the window functions
(Hann, Hamming, Blackman). Shapes are static,
so Shape and Size always fold, which lets the shape sub-graphs of exported models fold."""
from __future__ import annotations

import math

import numpy as np

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.dtypes import ONNX_TO_DTYPE
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.support import limits
from ember.support.errors import ModelImportError, UnsupportedError
from ember.types import DType


@converter("Identity")
def identity(ctx: NodeContext) -> Value:
    return ctx.require(0)


@converter("Dropout")
def dropout(ctx: NodeContext) -> list[Value | None]:
    """Inference: the identity, and an all-true mask. Training mode drops nothing only with
    ratio 0; a random mask is not supported (Ember compiles inference)."""
    x = ctx.require(0)
    if ctx.opset >= 12 and ctx.input(2) is not None:
        training = ctx.optional_constant(2, "training_mode")
        if training is not None and bool(np.any(training)):
            ratio = ctx.optional_constant(1, "ratio")
            if ratio is None or float(ratio.reshape(-1)[0]) != 0.0:
                raise UnsupportedError("Dropout in training mode with a non-zero ratio is not supported "
                                       "(its mask is random; Ember compiles inference)")
    mask = ctx.filled_result(x.type.shape, np.array(True), 1) if ctx.output_used(1) else None
    return [x, mask]


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
        raise ModelImportError("has no value attribute")
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
        raise ModelImportError("required input 0 (shape) is missing")
    if any(d < 0 for d in dims):
        raise ModelImportError(f"shape {list(dims)} has a negative dimension")
    limits.check_rank(len(dims), "the result")
    value = ctx.attr_tensor("value", None)
    if value is None:
        value = np.zeros(1, dtype=np.float32)
    if value.size != 1:
        raise ModelImportError(f"attribute 'value' must hold one element, got {value.size}")
    return ctx.filled_result(dims, value.reshape(-1)[:1])


@converter("Range", min_opset=11)
def range_(ctx: NodeContext) -> Value:
    start, limit, delta = (ctx.constant(i, what) for i, what in enumerate(("start", "limit", "delta")))
    for what, data in (("start", start), ("limit", limit), ("delta", delta)):
        if data.size != 1:
            raise ModelImportError(f"{what} must be a scalar, got shape {list(data.shape)}")
    dtype = start.dtype
    if dtype.kind in "iu":
        first, end, step = int(start.reshape(-1)[0]), int(limit.reshape(-1)[0]), int(delta.reshape(-1)[0])
        if step == 0:
            raise ModelImportError("delta must not be zero")
        count = max(-((first - end) // step), 0)
        limits.check_tensor(count * dtype.itemsize, f"{ctx.location}: Range of {count} elements")
        data = (first + np.arange(count, dtype=np.int64) * step).astype(dtype)
    elif dtype.kind == "f" or dtype == DType.BFLOAT16.numpy:
        origin, step_f = float(start.reshape(-1)[0]), float(delta.reshape(-1)[0])
        if step_f == 0:
            raise ModelImportError("delta must not be zero")
        span = (float(limit.reshape(-1)[0]) - float(start.reshape(-1)[0])) / step_f
        if not math.isfinite(span):
            raise ModelImportError(f"Range from {origin} to {float(limit.reshape(-1)[0])} by {step_f} has no finite "
                                   "length")
        count = max(math.ceil(span), 0)
        limits.check_tensor(count * dtype.itemsize, f"{ctx.location}: Range of {count} elements")
        # Accumulate in the element type (value += delta), as ONNX Runtime does.
        steps = np.full(count, step_f, dtype=dtype)
        if count:
            steps[0] = origin
        data = np.add.accumulate(steps, dtype=dtype)
    else:
        raise ModelImportError(f"Range does not take {dtype} inputs")
    return ctx.constant_result(data)


# Window functions (opset 17): w[n] for n in [0, size), N = size (periodic) or size - 1.
_WINDOWS = {
    "HannWindow": lambda n, N: np.sin(np.pi * n / N) ** 2,
    "HammingWindow": lambda n, N: 25.0 / 46.0 - (1 - 25.0 / 46.0) * np.cos(2 * np.pi * n / N),
    "BlackmanWindow": lambda n, N: 0.42 - 0.5 * np.cos(2 * np.pi * n / N) + 0.08 * np.cos(4 * np.pi * n / N),
}


@converter(*_WINDOWS, min_opset=17)
def window(ctx: NodeContext) -> Value:
    """Folds to a constant: the window depends only on its (constant) size."""
    size = ctx.constant(0, "size")
    if size.size != 1:
        raise ModelImportError(f"size must hold one value, got shape {list(size.shape)}")
    length = int(size.reshape(-1)[0])
    code = ctx.attr_int("output_datatype", 1)
    if code not in ONNX_TO_DTYPE:
        raise UnsupportedError(f"output_datatype {code} is not supported")
    periodic = ctx.attr_bool("periodic", True)
    n = np.arange(max(length, 0), dtype=np.float64)
    values = _WINDOWS[ctx.op_type](n, length if periodic else length - 1)
    return ctx.constant_result(values.astype(ONNX_TO_DTYPE[code].numpy))


@converter("MelWeightMatrix", min_opset=17)
def mel_weight_matrix(ctx: NodeContext) -> Value:
    """Folds to a constant [dft_length // 2 + 1, num_mel_bins] of triangular filters evenly
    spaced on the mel scale (mel = 2595 log10(1 + hz / 700)), as ONNX defines them."""
    scalars = []
    for i, what in enumerate(("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")):
        data = ctx.constant(i, what)
        if data.size != 1:
            raise ModelImportError(f"{what} must hold one value, got shape {list(data.shape)}")
        scalars.append(data.reshape(-1)[0])
    bins, length, rate = (int(v) for v in scalars[:3])
    low, high = (float(v) for v in scalars[3:])
    edges = np.arange(bins + 2)
    low_mel, high_mel = 2595 * np.log10(1 + low / 700), 2595 * np.log10(1 + high / 700)
    hz = 700 * (10 ** ((edges * (high_mel - low_mel) / (bins + 2) + low_mel) / 2595) - 1)
    if not (rate > 0 and length > 0 and bins > 0 and np.isfinite(hz).all()):
        raise ModelImportError(f"num_mel_bins {bins}, dft_length {length} and sample_rate {rate} must be positive, "
                               f"and the edges {low:g} Hz, {high:g} Hz finite")
    points = (((length + 1) * hz) // rate).astype(int)
    if points.min() < 0 or points.max() > length // 2:
        raise ModelImportError(f"the filters' edges fall on bins {points.min()} to {points.max()}, outside the "
                               f"{length // 2 + 1} bins of a {length}-point DFT (lower_edge_hertz {low:g}, "
                               f"upper_edge_hertz {high:g}, sample_rate {rate})")
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        left, center, right = points[i], points[i + 1], points[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            out[left:center + 1, i] = (np.arange(left, center + 1) - left) / (center - left)
        if right > center:
            out[center:right, i] = (right - np.arange(center, right)) / (right - center)
    code = ctx.attr_int("output_datatype", 1)
    if code not in ONNX_TO_DTYPE:
        raise UnsupportedError(f"output_datatype {code} is not supported")
    return ctx.constant_result(out.astype(ONNX_TO_DTYPE[code].numpy))
