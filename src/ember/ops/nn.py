"""Dense and windowed neural-network ops: MatMul, Gemm, Conv, MaxPool, AveragePool and
BatchNormalization. Window attributes are fully resolved (no auto_pad) by the frontend."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ember.ops.registry import NoAttrs, OpDef, OpError, define_op
from ember.ops.shape_util import broadcast_shapes, check_padded_input, pooled_size, require_float, same_dtype
from ember.types import DType, TensorType


def _matmul_infer(attrs, types):
    a, b = types
    dtype = same_dtype(types, "MatMul")
    if dtype is DType.BOOL or a.rank == 0 or b.rank == 0:
        raise OpError(f"MatMul needs numeric operands of rank >= 1, got {a} and {b}")
    a_shape = (1,) + a.shape if a.rank == 1 else a.shape
    b_shape = b.shape + (1,) if b.rank == 1 else b.shape
    if a_shape[-1] != b_shape[-2]:
        raise OpError(f"MatMul contraction mismatch: {list(a.shape)} @ {list(b.shape)}")
    batch = broadcast_shapes(a_shape[:-2], b_shape[:-2])
    shape = batch + (a_shape[-2], b_shape[-1])
    if a.rank == 1:
        shape = shape[:-2] + shape[-1:]
    if b.rank == 1:
        shape = shape[:-1]
    return (TensorType(dtype, shape),)


def _matmul(attrs, arrays):
    a, b = arrays
    if a.dtype.kind == "f" and a.dtype != np.float64:
        return (np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype),)
    return (np.matmul(a, b),)


define_op(OpDef("MatMul", ("a", "b"), ("c",), _matmul_infer, _matmul, attrs=NoAttrs))


@dataclass(frozen=True)
class GemmAttrs:
    alpha: float = 1.0
    beta: float = 1.0
    transA: bool = False
    transB: bool = False


def _gemm_infer(attrs: GemmAttrs, types):
    a, b, c = types
    same_dtype(types, "Gemm")
    if a.rank != 2 or b.rank != 2:
        raise OpError(f"Gemm needs 2-D A and B, got {a} and {b}")
    m, k = (a.shape[1], a.shape[0]) if attrs.transA else a.shape
    k2, n = (b.shape[1], b.shape[0]) if attrs.transB else b.shape
    if k != k2:
        raise OpError(f"Gemm contraction mismatch: {k} vs {k2}")
    if c is not None and broadcast_shapes(c.shape, (m, n)) != (m, n):
        raise OpError(f"Gemm C of shape {list(c.shape)} does not broadcast to {[m, n]}")
    return (TensorType(a.dtype, (m, n)),)


def _gemm(attrs: GemmAttrs, arrays):
    a, b, c = arrays
    a64 = a.astype(np.float64).T if attrs.transA else a.astype(np.float64)
    b64 = b.astype(np.float64).T if attrs.transB else b.astype(np.float64)
    y = attrs.alpha * (a64 @ b64)
    if c is not None:
        y = y + attrs.beta * c
    return (y.astype(a.dtype),)


define_op(OpDef("Gemm", ("a", "b", "c?"), ("y",), _gemm_infer, _gemm, attrs=GemmAttrs, primitive=False))


@dataclass(frozen=True)
class ConvAttrs:
    """strides/dilations per spatial axis; pads = begins then ends (ONNX order)."""

    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]
    group: int = 1


def _check_window_attrs(op, attrs, spatial: int) -> None:
    if len(attrs.strides) != spatial or len(attrs.pads) != 2 * spatial or len(attrs.dilations) != spatial:
        raise OpError(f"{op} attributes do not match {spatial} spatial axes: {attrs}")
    if any(s < 1 for s in attrs.strides) or any(d < 1 for d in attrs.dilations) or any(p < 0 for p in attrs.pads):
        raise OpError(f"{op} needs positive strides and dilations and non-negative pads: {attrs}")


def _conv_infer(attrs: ConvAttrs, types):
    x, w, b = types
    same_dtype(types, "Conv")
    require_float(x, "Conv")
    if x.rank < 3 or w.rank != x.rank:
        raise OpError(f"Conv needs input and weight of equal rank >= 3, got {x} and {w}")
    spatial = x.rank - 2
    _check_window_attrs("Conv", attrs, spatial)
    check_padded_input(x, attrs.pads, "Conv")
    channels, out_channels = x.shape[1], w.shape[0]
    if attrs.group < 1 or channels % attrs.group or out_channels % attrs.group:
        raise OpError(f"Conv group {attrs.group} does not divide {channels} input / {out_channels} output channels")
    if w.shape[1] * attrs.group != channels:
        raise OpError(f"Conv weight {list(w.shape)} expects {w.shape[1] * attrs.group} input channels, "
                      f"input has {channels}")
    if b is not None and b.shape != (out_channels,):
        raise OpError(f"Conv bias must have shape [{out_channels}], got {list(b.shape)}")
    dims = tuple(
        pooled_size(x.shape[2 + i], w.shape[2 + i], attrs.strides[i], attrs.pads[i], attrs.pads[i + spatial],
                    attrs.dilations[i], False)
        for i in range(spatial)
    )
    return (TensorType(x.dtype, (x.shape[0], out_channels) + dims),)


def windows(x: np.ndarray, kernel, strides, pads, dilations, pad_value, out_dims) -> np.ndarray:
    """View of `x` (N, C, *spatial) as (N, C, *out_dims, *kernel) windows after padding.
    Extra end padding covers ceil_mode windows that run past the input."""
    spatial = x.ndim - 2
    widths = [(0, 0), (0, 0)]
    for i in range(spatial):
        extent = dilations[i] * (kernel[i] - 1) + 1
        needed = (out_dims[i] - 1) * strides[i] + extent
        end = max(needed - x.shape[2 + i] - pads[i], 0)
        widths.append((pads[i], end))
    xp = np.pad(x, widths, mode="constant", constant_values=pad_value)
    extents = tuple(dilations[i] * (kernel[i] - 1) + 1 for i in range(spatial))
    view = sliding_window_view(xp, extents, axis=tuple(range(2, 2 + spatial)))
    index: tuple[slice, ...] = (slice(None), slice(None))
    index += tuple(slice(0, (out_dims[i] - 1) * strides[i] + 1, strides[i]) for i in range(spatial))
    index += tuple(slice(None, None, dilations[i]) for i in range(spatial))
    return view[index]


def _conv(attrs: ConvAttrs, arrays):
    x, w, b = arrays
    (out_type,) = _conv_infer(attrs, [TensorType.of(a) if a is not None else None for a in arrays])
    spatial = x.ndim - 2
    out_dims = out_type.shape[2:]
    win = windows(x.astype(np.float64), w.shape[2:], attrs.strides, attrs.pads, attrs.dilations, 0.0, out_dims)
    n, c = x.shape[:2]
    g = attrs.group
    m = w.shape[0]
    win = win.reshape((n, g, c // g) + win.shape[2:])
    wg = w.astype(np.float64).reshape((g, m // g, c // g) + w.shape[2:])
    letters = "hijkl"[:spatial]
    kernel_letters = "pqrst"[:spatial]
    subscripts = f"ngc{letters}{kernel_letters},gmc{kernel_letters}->ngm{letters}"
    y = np.einsum(subscripts, win, wg, optimize=True).reshape((n, m) + tuple(out_dims))
    if b is not None:
        y = y + b.astype(np.float64).reshape((1, m) + (1,) * spatial)
    return (y.astype(x.dtype),)


define_op(OpDef("Conv", ("x", "w", "b?"), ("y",), _conv_infer, _conv, attrs=ConvAttrs))


@dataclass(frozen=True)
class PoolAttrs:
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]
    ceil_mode: bool = False
    count_include_pad: bool = False


def _pool_infer(name):
    def infer(attrs: PoolAttrs, types):
        (x,) = types
        if x.rank < 3:
            raise OpError(f"{name} needs an input of rank >= 3, got {x}")
        spatial = x.rank - 2
        if len(attrs.kernel) != spatial:
            raise OpError(f"{name} kernel {list(attrs.kernel)} does not match {spatial} spatial axes")
        _check_window_attrs(name, attrs, spatial)
        check_padded_input(x, attrs.pads, name)
        if x.dtype is DType.BOOL:
            raise OpError(f"{name} does not take bool")
        dims = tuple(
            pooled_size(x.shape[2 + i], attrs.kernel[i], attrs.strides[i], attrs.pads[i],
                        attrs.pads[i + spatial], attrs.dilations[i], attrs.ceil_mode)
            for i in range(spatial)
        )
        return (x.with_shape(x.shape[:2] + dims),)

    return infer


def _maxpool(attrs: PoolAttrs, arrays):
    (x,) = arrays
    (out_type,) = _pool_infer("MaxPool")(attrs, [TensorType.of(x)])
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    win = windows(x, attrs.kernel, attrs.strides, attrs.pads, attrs.dilations, lowest, out_type.shape[2:])
    spatial = x.ndim - 2
    return (win.max(axis=tuple(range(-spatial, 0))).astype(x.dtype),)


def _avgpool(attrs: PoolAttrs, arrays):
    (x,) = arrays
    (out_type,) = _pool_infer("AveragePool")(attrs, [TensorType.of(x)])
    spatial = x.ndim - 2
    out_dims = out_type.shape[2:]
    axes = tuple(range(-spatial, 0))
    xf = x.astype(np.float64)
    sums = windows(xf, attrs.kernel, attrs.strides, attrs.pads, attrs.dilations, 0.0, out_dims).sum(axis=axes)
    # Count, per output, the window cells inside the input (or inside input plus the explicit
    # pads when count_include_pad); ceil_mode overhang beyond the pads never counts.
    ones = np.ones((1, 1) + x.shape[2:])
    if attrs.count_include_pad:
        widths = [(0, 0), (0, 0)] + [(attrs.pads[i], attrs.pads[i + spatial]) for i in range(spatial)]
        ones = np.pad(ones, widths, constant_values=1.0)
        pads = (0,) * (2 * spatial)
    else:
        pads = attrs.pads
    counts = windows(ones, attrs.kernel, attrs.strides, pads, attrs.dilations, 0.0, out_dims).sum(axis=axes)
    return ((sums / counts).astype(x.dtype),)


define_op(OpDef("MaxPool", ("x",), ("y",), _pool_infer("MaxPool"), _maxpool, attrs=PoolAttrs))
define_op(OpDef("AveragePool", ("x",), ("y",), _pool_infer("AveragePool"), _avgpool, attrs=PoolAttrs))


@dataclass(frozen=True)
class BatchNormAttrs:
    epsilon: float = 1e-5


def _batchnorm_infer(attrs: BatchNormAttrs, types):
    x, scale, bias, mean, var = types
    require_float(x, "BatchNormalization")
    if x.rank < 2:
        raise OpError(f"BatchNormalization needs rank >= 2, got {x}")
    for name, t in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var)):
        if t.shape != (x.shape[1],):
            raise OpError(f"BatchNormalization {name} must have shape [{x.shape[1]}], got {list(t.shape)}")
    return (x,)


def _batchnorm(attrs: BatchNormAttrs, arrays):
    x, scale, bias, mean, var = (a.astype(np.float64) for a in arrays)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = scale / np.sqrt(var + attrs.epsilon)
    y = (x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape)
    return (y.astype(arrays[0].dtype),)


define_op(OpDef("BatchNormalization", ("x", "scale", "bias", "mean", "var"), ("y",), _batchnorm_infer,
                _batchnorm, attrs=BatchNormAttrs, primitive=False))
