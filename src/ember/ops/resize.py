"""Resize: nearest, linear and cubic interpolation over any axes, with ONNX's coordinate
transformations, antialiasing filters, exclude_outside and tf_crop_and_resize's
extrapolation. The frontend resolves scales / sizes / axes / keep_aspect_ratio_policy into
one static output size and one scale per axis.

Interpolation is separable, so the reference resizes one axis at a time: each output
position maps to a source coordinate, takes `n` neighbouring inputs (edge-clamped) and a
weighted sum of them, in float64; integer outputs are rounded and saturated."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ember.ops.registry import OpDef, OpError, define_op
from ember.types import DType

MODES = ("nearest", "linear", "cubic")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
              "tf_crop_and_resize")


@dataclass(frozen=True)
class ResizeAttrs:
    """sizes: the output shape; scales: output/input per axis (as given, which can differ from
    sizes/input when a size was rounded); roi: (starts, then ends) per axis, used by
    tf_crop_and_resize only."""

    sizes: tuple[int, ...]
    scales: tuple[float, ...]
    mode: str = "nearest"
    coordinate_transformation_mode: str = "half_pixel"
    nearest_mode: str = "round_prefer_floor"
    cubic_coeff_a: float = -0.75
    exclude_outside: bool = False
    extrapolation_value: float = 0.0
    antialias: bool = False
    roi: tuple[float, ...] = ()


def _resize_infer(attrs: ResizeAttrs, types):
    (x,) = types
    if len(attrs.sizes) != x.rank or len(attrs.scales) != x.rank:
        raise OpError(f"Resize sizes {list(attrs.sizes)} and scales {list(attrs.scales)} must have {x.rank} values")
    if attrs.mode not in MODES or attrs.nearest_mode not in NEAREST_MODES \
            or attrs.coordinate_transformation_mode not in TRANSFORMS:
        raise OpError(f"Resize mode '{attrs.mode}' / nearest_mode '{attrs.nearest_mode}' / coordinate "
                      f"transformation '{attrs.coordinate_transformation_mode}' is not supported")
    if attrs.roi and len(attrs.roi) != 2 * x.rank:
        raise OpError(f"Resize roi {list(attrs.roi)} must have {2 * x.rank} values")
    if any(s <= 0 for s in attrs.scales) or x.dtype is DType.BOOL:
        raise OpError(f"Resize needs positive scales and a numeric input, got {list(attrs.scales)} for {x}")
    if 0 in x.shape and 0 not in attrs.sizes:
        raise OpError(f"Resize of {x} to {list(attrs.sizes)}: an empty input axis resized to a non-empty one has no "
                      "input to sample")
    return (x.with_shape(attrs.sizes),)


def _nearest(ratio: np.ndarray, mode: str) -> np.ndarray:
    """Two taps [floor, floor + 1]; an exact integer coordinate has ratio 1 (takes the second)."""
    right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
             "floor": np.zeros_like(ratio, bool), "ceil": np.ones_like(ratio, bool)}[mode]
    right = np.where(ratio == 1.0, True, right)
    return np.stack([~right, right], axis=-1).astype(np.float64)


def _cubic_kernel(x: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic weights at distances x, evaluated in float32 as ONNX's reference and ONNX
    Runtime evaluate them (an absurd cubic_coeff_a overflows there, as in theirs), returned as
    float64."""
    x = np.abs(x).astype(np.float32)
    a32 = np.float32(a)
    with np.errstate(over="ignore", invalid="ignore"):
        near = ((a32 + 2) * x - (a32 + 3)) * x * x + 1
        far = ((a32 * x - 5 * a32) * x + 8 * a32) * x - 4 * a32
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0)).astype(np.float64)


def _coefficients(attrs: ResizeAttrs, ratio: np.ndarray, scale: float) -> np.ndarray:
    """[positions, n] tap weights for taps at floor(x) + start + arange(n)."""
    if attrs.mode == "nearest":
        return _nearest(ratio, attrs.nearest_mode)
    if attrs.antialias and scale < 1.0:
        support = 1.0 if attrs.mode == "linear" else 2.0
        start = math.floor(-support / scale) + 1
        taps = np.arange(start, 2 - start)
        args = (taps[None, :] - ratio[:, None]) * scale
        w = np.clip(1 - np.abs(args), 0, 1) if attrs.mode == "linear" else _cubic_kernel(args, attrs.cubic_coeff_a)
        return w / w.sum(axis=1, keepdims=True)
    if attrs.mode == "linear":
        return np.stack([1 - ratio, ratio], axis=-1)
    taps = np.array([-1.0, 0.0, 1.0, 2.0])
    return _cubic_kernel(taps[None, :] - ratio[:, None], attrs.cubic_coeff_a)


def _source_coordinates(attrs: ResizeAttrs, axis: int, size_in: int, size_out: int):
    scale = attrs.scales[axis]
    y = np.arange(size_out, dtype=np.float64)
    mode = attrs.coordinate_transformation_mode
    length = scale * size_in  # the unrounded output length
    outside = None
    if mode == "align_corners":
        x = np.zeros(size_out) if length == 1 else y * (size_in - 1) / (length - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        start, end = (attrs.roi[axis], attrs.roi[axis + len(attrs.sizes)]) if attrs.roi else (0.0, 1.0)
        if length == 1:
            x = np.full(size_out, (end - start) * (size_in - 1) / 2)
        else:
            x = y * (end - start) * (size_in - 1) / (length - 1)
        x = x + start * (size_in - 1)
        outside = (x < 0) | (x > size_in - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(size_out, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = size_in / 2 * (1 - size_out / length)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        x = (y + 0.5) / scale - 0.5
    return x, outside


def skips_zero_taps(attrs: ResizeAttrs, axis: int) -> bool:
    """Whether a tap of weight 0 along `axis` contributes nothing (rather than 0 * its value,
    NaN for an infinite one): nearest's untaken tap, and an antialiasing filter's taps outside
    its support (the window is as wide as the widest footprint; ONNX Runtime's is each
    position's footprint, so an infinite pixel beyond it does not reach the output)."""
    return attrs.mode == "nearest" or (attrs.antialias and attrs.scales[axis] < 1.0)


def axis_taps(attrs: ResizeAttrs, axis: int, size_in: int, size_out: int):
    """One axis's resampling as tables: (taps [size_out, n] in [0, size_in), coefficients
    [size_out, n] in float64, outside: [size_out] bool or None). Output position j is
    sum_k coefficients[j, k] * input[taps[j, k]], or extrapolation_value where outside[j]
    (the C kernels precompute these tables; size_in and size_out must be non-zero)."""
    x, outside = _source_coordinates(attrs, axis, size_in, size_out)
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)  # prefer the input on the left of x
    coeffs = _coefficients(attrs, ratio, attrs.scales[axis])
    n = coeffs.shape[1]
    # The n taps nearest to x, ties to the smaller index (as ONNX's reference picks them).
    if n % 2 == 0:
        first = np.where(x == base, base - n // 2, base - n // 2 + 1)
    else:
        first = np.where(x - base <= 0.5, base - (n - 1) // 2, base - (n - 1) // 2 + 1)
    taps = first[:, None].astype(np.int64) + np.arange(n)[None, :]
    if attrs.exclude_outside:
        coeffs = np.where((taps < 0) | (taps >= size_in), 0.0, coeffs)
        total = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    return np.clip(taps, 0, size_in - 1), coeffs, outside


def resized_axes(attrs: ResizeAttrs, shape: tuple[int, ...]) -> list[int]:
    """The axes the reference resamples, in order (the others keep their size at scale 1)."""
    return [axis for axis, size_out in enumerate(attrs.sizes)
            if not (size_out == shape[axis] and math.isclose(attrs.scales[axis], 1.0) and (
                not attrs.roi or (attrs.roi[axis] == 0.0 and attrs.roi[axis + len(shape)] == 1.0)))]


def _resize_axis(attrs: ResizeAttrs, data: np.ndarray, axis: int, size_out: int) -> np.ndarray:
    size_in = data.shape[axis]
    if size_out == 0:
        return np.take(data, [], axis=axis)
    taps, coeffs, outside = axis_taps(attrs, axis, size_in, size_out)
    gathered = np.take(data, taps, axis=axis)
    shape = (1,) * axis + coeffs.shape + (1,) * (data.ndim - axis - 1)
    weighted = gathered * coeffs.reshape(shape)
    if skips_zero_taps(attrs, axis):  # a tap of weight 0 must not leak a NaN (0 * NaN, 0 * inf)
        weighted = np.where(coeffs.reshape(shape) == 0, 0.0, weighted)
    out = weighted.sum(axis=axis + 1)
    if outside is not None and outside.any():
        mask = outside.reshape((1,) * axis + (size_out,) + (1,) * (data.ndim - axis - 1))
        out = np.where(mask, attrs.extrapolation_value, out)
    return out


def _resize(attrs: ResizeAttrs, arrays):
    (x,) = arrays
    y = x.astype(np.float64)
    for axis in resized_axes(attrs, x.shape):
        y = _resize_axis(attrs, y, axis, attrs.sizes[axis])
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        y = np.clip(np.rint(y), info.min, info.max)
    return (y.astype(x.dtype),)


define_op(OpDef("Resize", ("x",), ("y",), _resize_infer, _resize, attrs=ResizeAttrs))

__all__ = ["MODES", "NEAREST_MODES", "TRANSFORMS", "ResizeAttrs", "axis_taps", "resized_axes", "skips_zero_taps"]
