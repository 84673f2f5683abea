"""Windowed ops beyond Conv/MaxPool/AveragePool: ConvTranspose, LpPool, MaxPool with its
Indices output (MaxPoolWithIndices), MaxUnpool and Col2Im. Window attributes are resolved by
the frontend (no auto_pad here); all are primitives without a C kernel yet."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ember.ops.nn import PoolAttrs, _pool_infer, windows
from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import require_float, same_dtype
from ember.types import DType, TensorType


@dataclass(frozen=True)
class ConvTransposeAttrs:
    """pads crop the full output (begins, then ends); a negative pad extends it with zeros
    (ONNX's output_padding is a negative end pad)."""

    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]
    group: int = 1


def _full_size(size: int, kernel: int, stride: int, dilation: int) -> int:
    return stride * (size - 1) + dilation * (kernel - 1) + 1


def _conv_transpose_infer(attrs: ConvTransposeAttrs, types):
    x, w, b = types
    same_dtype(types, "ConvTranspose")
    require_float(x, "ConvTranspose")
    spatial = x.rank - 2
    if x.rank < 3 or w.rank != x.rank:
        raise OpError(f"ConvTranspose needs input and weight of equal rank >= 3, got {x} and {w}")
    if not (len(attrs.strides) == len(attrs.dilations) == spatial and len(attrs.pads) == 2 * spatial):
        raise OpError(f"ConvTranspose attributes do not match {spatial} spatial axes: {attrs}")
    if any(s < 1 for s in attrs.strides) or any(d < 1 for d in attrs.dilations):
        raise OpError(f"ConvTranspose needs positive strides and dilations: {attrs}")
    if attrs.group < 1 or x.shape[1] != w.shape[0] or x.shape[1] % attrs.group:
        raise OpError(f"ConvTranspose weight {w} does not fit input {x} with group {attrs.group}")
    out_channels = w.shape[1] * attrs.group
    if b is not None and b.shape != (out_channels,):
        raise OpError(f"ConvTranspose bias must have shape [{out_channels}], got {list(b.shape)}")
    dims = []
    for i in range(spatial):
        full = _full_size(x.shape[2 + i], w.shape[2 + i], attrs.strides[i], attrs.dilations[i])
        size = full - attrs.pads[i] - attrs.pads[i + spatial]
        if size < 0:
            raise OpError(f"ConvTranspose pads {list(attrs.pads)} crop spatial axis {i} below zero")
        dims.append(size)
    return (x.with_shape((x.shape[0], out_channels) + tuple(dims)),)


def _conv_transpose(attrs: ConvTransposeAttrs, arrays):
    x, w, b = arrays
    (out_type,) = _conv_transpose_infer(attrs, [TensorType.of(a) if a is not None else None for a in arrays])
    n, c = x.shape[:2]
    g = attrs.group
    m = w.shape[1]
    spatial = x.ndim - 2
    kernel = w.shape[2:]
    full_dims = [_full_size(x.shape[2 + i], kernel[i], attrs.strides[i], attrs.dilations[i]) for i in range(spatial)]
    full = np.zeros((n, g, m) + tuple(full_dims))
    xg = x.astype(np.float64).reshape((n, g, c // g) + x.shape[2:])
    wg = w.astype(np.float64).reshape((g, c // g, m) + tuple(kernel))
    letters = "hijkl"[:spatial]
    for offset in itertools.product(*(range(k) for k in kernel)):
        contribution = np.einsum(f"ngc{letters},gcm->ngm{letters}", xg, wg[(slice(None),) * 3 + offset])
        index = tuple(slice(o * d, o * d + s * (size - 1) + 1, s) for o, d, s, size in
                      zip(offset, attrs.dilations, attrs.strides, x.shape[2:], strict=True))
        full[(slice(None),) * 3 + index] += contribution
    full = full.reshape((n, g * m) + tuple(full_dims))
    out = np.zeros(out_type.shape)
    src, dst = [slice(None)] * 2, [slice(None)] * 2
    for i in range(spatial):
        begin = attrs.pads[i]
        lo, hi = max(begin, 0), min(begin + out_type.shape[2 + i], full_dims[i])
        src.append(slice(lo, max(hi, lo)))
        dst.append(slice(lo - begin, lo - begin + max(hi - lo, 0)))
    out[tuple(dst)] = full[tuple(src)]
    if b is not None:
        out = out + b.astype(np.float64).reshape((1, -1) + (1,) * spatial)
    return (out.astype(x.dtype),)


define_op(OpDef("ConvTranspose", ("x", "w", "b?"), ("y",), _conv_transpose_infer, _conv_transpose,
                attrs=ConvTransposeAttrs))


@dataclass(frozen=True)
class LpPoolAttrs:
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]
    ceil_mode: bool = False
    p: int = 2

    @property
    def pool(self) -> PoolAttrs:
        return PoolAttrs(self.kernel, self.strides, self.pads, self.dilations, self.ceil_mode)


def _lp_pool_infer(attrs: LpPoolAttrs, types):
    require_float(types[0], "LpPool")
    if attrs.p < 1:
        raise OpError(f"LpPool p must be >= 1, got {attrs.p}")
    return _pool_infer("LpPool")(attrs.pool, types)


def _lp_pool(attrs: LpPoolAttrs, arrays):
    """(sum over the window of |x|^p)^(1/p); padding counts as zeros."""
    (x,) = arrays
    (out_type,) = _lp_pool_infer(attrs, [TensorType.of(x)])
    powered = np.abs(x.astype(np.float64)) ** attrs.p
    win = windows(powered, attrs.kernel, attrs.strides, attrs.pads, attrs.dilations, 0.0, out_type.shape[2:])
    sums = win.sum(axis=tuple(range(-len(attrs.kernel), 0)))
    return ((sums ** (1.0 / attrs.p)).astype(x.dtype),)


define_op(OpDef("LpPool", ("x",), ("y",), _lp_pool_infer, _lp_pool, attrs=LpPoolAttrs))


@dataclass(frozen=True)
class MaxPoolIndicesAttrs:
    """storage_order 0: indices are row-major offsets into the whole input; 1: the spatial
    part is column-major (ONNX MaxPool's Indices output)."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]
    ceil_mode: bool = False
    storage_order: int = 0

    @property
    def pool(self) -> PoolAttrs:
        return PoolAttrs(self.kernel, self.strides, self.pads, self.dilations, self.ceil_mode)


def _maxpool_indices_infer(attrs: MaxPoolIndicesAttrs, types):
    (y,) = _pool_infer("MaxPoolWithIndices")(attrs.pool, types)
    return (y, y.with_dtype(DType.INT64))


def _maxpool_indices(attrs: MaxPoolIndicesAttrs, arrays):
    """The first maximum of each window (scanning in row-major order) and where it is."""
    (x,) = arrays
    (y_type, _) = _maxpool_indices_infer(attrs, [TensorType.of(x)])
    spatial = x.ndim - 2
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    out_dims = y_type.shape[2:]
    win = windows(x.astype(np.float64), attrs.kernel, attrs.strides, attrs.pads, attrs.dilations, lowest, out_dims)
    flat = win.reshape(win.shape[:2 + spatial] + (-1,))
    arg = np.argmax(flat, axis=-1)
    offsets = np.unravel_index(arg, attrs.kernel)
    n, c = x.shape[:2]
    coords = []
    for i in range(spatial):
        start = np.arange(out_dims[i]) * attrs.strides[i] - attrs.pads[i]
        start = start.reshape((1, 1) + tuple(-1 if j == i else 1 for j in range(spatial)))
        coords.append(start + offsets[i] * attrs.dilations[i])
    dims = x.shape[2:]
    if attrs.storage_order == 0:
        position = np.ravel_multi_index(tuple(coords), dims, mode="clip")
    else:
        position = np.ravel_multi_index(tuple(reversed(coords)), tuple(reversed(dims)), mode="clip")
    plane = (np.arange(n * c).reshape(n, c) * int(np.prod(dims))).reshape((n, c) + (1,) * spatial)
    values = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    return (values.astype(x.dtype), (plane + position).astype(np.int64))


define_op(OpDef("MaxPoolWithIndices", ("x",), ("y", "indices"), _maxpool_indices_infer, _maxpool_indices,
                attrs=MaxPoolIndicesAttrs))


@dataclass(frozen=True)
class MaxUnpoolAttrs:
    """output: the spatial output shape; indices address a tensor of the default
    ((in - 1) * stride + kernel - pads) shape, which sits at the start of a larger output."""

    output: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]

    def default_dims(self, dims) -> tuple[int, ...]:
        n = len(self.kernel)
        return tuple((d - 1) * self.strides[i] + self.kernel[i] - self.pads[i] - self.pads[i + n]
                     for i, d in enumerate(dims))


def _max_unpool_infer(attrs: MaxUnpoolAttrs, types):
    x, indices = types
    if indices.shape != x.shape or indices.dtype is not DType.INT64:
        raise OpError(f"MaxUnpool indices {indices} must be i64 of the input's shape {list(x.shape)}")
    spatial = x.rank - 2
    if not (len(attrs.kernel) == len(attrs.strides) == spatial and len(attrs.pads) == 2 * spatial) \
            or any(k < 1 for k in attrs.kernel) or any(s < 1 for s in attrs.strides) or any(p < 0 for p in attrs.pads) \
            or any(d < 0 for d in attrs.default_dims(x.shape[2:])):
        raise OpError(f"MaxUnpool needs a positive kernel and strides and non-negative pads for {spatial} spatial "
                      f"axes that leave a shape, got {attrs}")
    if len(attrs.output) != x.rank - 2 or any(
            o < d for o, d in zip(attrs.output, attrs.default_dims(x.shape[2:]), strict=True)):
        raise OpError(f"MaxUnpool output {list(attrs.output)} is smaller than the unpooled input")
    return (x.with_shape(x.shape[:2] + attrs.output),)


def _max_unpool(attrs: MaxUnpoolAttrs, arrays):
    x, indices = arrays
    inner = x.shape[:2] + attrs.default_dims(x.shape[2:])
    flat = np.zeros(int(np.prod(inner)), dtype=x.dtype)
    if np.any((indices < 0) | (indices >= flat.size)):
        raise OpError("MaxUnpool index out of range")
    flat[indices.reshape(-1)] = x.reshape(-1)
    out = np.zeros(x.shape[:2] + attrs.output, dtype=x.dtype)
    out[tuple(slice(0, d) for d in inner)] = flat.reshape(inner)
    return (out,)


define_op(OpDef("MaxUnpool", ("x", "indices"), ("y",), _max_unpool_infer, _max_unpool, attrs=MaxUnpoolAttrs))


@dataclass(frozen=True)
class Col2ImAttrs:
    image_shape: tuple[int, ...]
    block_shape: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]

    def blocks(self) -> tuple[int, ...]:
        n = len(self.image_shape)
        return tuple((self.image_shape[i] + self.pads[i] + self.pads[i + n]
                      - self.dilations[i] * (self.block_shape[i] - 1) - 1) // self.strides[i] + 1 for i in range(n))


def _col2im_infer(attrs: Col2ImAttrs, types):
    (x,) = types
    n = len(attrs.image_shape)
    if len(attrs.block_shape) != n or len(attrs.strides) != n or len(attrs.dilations) != n or len(attrs.pads) != 2 * n:
        raise OpError(f"Col2Im attributes do not match {n} spatial axes: {attrs}")
    if min(attrs.strides + attrs.dilations + attrs.block_shape + attrs.image_shape, default=1) < 1 \
            or min(attrs.pads, default=0) < 0:
        raise OpError(f"Col2Im needs positive strides, dilations, block and image sizes and non-negative pads: "
                      f"{attrs}")
    if min(attrs.blocks(), default=1) < 1:
        raise OpError(f"Col2Im blocks {list(attrs.block_shape)} do not fit the padded image {list(attrs.image_shape)}")
    block = int(np.prod(attrs.block_shape))
    if x.rank != 3 or x.shape[1] % block or x.shape[2] != int(np.prod(attrs.blocks())):
        raise OpError(f"Col2Im input {x} does not hold blocks {list(attrs.block_shape)} of image "
                      f"{list(attrs.image_shape)}")
    return (x.with_shape((x.shape[0], x.shape[1] // block) + attrs.image_shape),)


def _col2im(attrs: Col2ImAttrs, arrays):
    """Sums each block column back into the (padded) image."""
    (x,) = arrays
    n, cb, _ = x.shape
    spatial = len(attrs.image_shape)
    c = cb // int(np.prod(attrs.block_shape))
    blocks = attrs.blocks()
    padded = tuple(attrs.image_shape[i] + attrs.pads[i] + attrs.pads[i + spatial] for i in range(spatial))
    image = np.zeros((n, c) + padded)
    cols = x.astype(np.float64).reshape((n, c) + attrs.block_shape + blocks)
    for offset in itertools.product(*(range(k) for k in attrs.block_shape)):
        index = tuple(slice(o * d, o * d + s * (nb - 1) + 1, s) for o, d, s, nb in
                      zip(offset, attrs.dilations, attrs.strides, blocks, strict=False))
        image[(slice(None),) * 2 + index] += cols[(slice(None),) * 2 + offset]
    crop = tuple(slice(attrs.pads[i], attrs.pads[i] + attrs.image_shape[i]) for i in range(spatial))
    return (image[(slice(None),) * 2 + crop].astype(x.dtype),)


define_op(OpDef("Col2Im", ("x",), ("y",), _col2im_infer, _col2im, attrs=Col2ImAttrs))

__all__ = ["Col2ImAttrs", "ConvTransposeAttrs", "LpPoolAttrs", "MaxPoolIndicesAttrs", "MaxUnpoolAttrs"]
