"""Converters for Resize (opsets 10 to 19+) and the older Upsample: scales, sizes, axes
and keep_aspect_ratio_policy resolve here into Resize's static output size and per-axis
scales, which must therefore be constants. Resize-10 and Upsample map input to output
coordinates asymmetrically (x_out / scale) and take the floor for nearest."""
from __future__ import annotations

import math

import numpy as np

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.converters.tensor import normalize_axes
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops.resize import MODES, NEAREST_MODES, TRANSFORMS, ResizeAttrs
from ember.support.errors import ModelImportError, UnsupportedError


def _floats(data: np.ndarray | None) -> tuple[float, ...] | None:
    if data is None or data.size == 0:
        return None
    return tuple(float(v) for v in data.reshape(-1))


def resolve_sizes(in_shape, axes, scales, sizes, policy: str) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(output sizes, scales) over all axes from scales or sizes given for `axes`."""
    rank = len(in_shape)
    out_scales, out_sizes = [1.0] * rank, list(in_shape)
    axes = list(axes)
    for what, values in (("scales", scales), ("sizes", sizes)):
        if values is not None and len(values) != len(axes):
            raise ModelImportError(f"{what} {list(values)} must have one value per axis resized ({len(axes)}: "
                                   f"axes {axes} of an input of rank {rank})")
    if sizes is not None and any(v < 0 for v in sizes):
        raise ModelImportError(f"sizes {list(sizes)} must not be negative")
    if sizes is None and scales is not None and not all(math.isfinite(v) and v > 0 for v in scales):
        raise ModelImportError(f"scales {list(scales)} must be positive and finite")
    if sizes is not None:
        picked = [sizes[i] / in_shape[a] if in_shape[a] else 1.0 for i, a in enumerate(axes)]
        if policy != "stretch":
            scale = min(picked) if policy == "not_larger" else max(picked)
            picked = [scale] * len(axes)
            sizes = [int(scale * in_shape[a] + 0.5) for a in axes]  # round half up
        for i, a in enumerate(axes):
            out_scales[a], out_sizes[a] = picked[i], int(sizes[i])
    elif scales is not None:
        for i, a in enumerate(axes):
            out_scales[a] = scales[i]
            out_sizes[a] = int(math.floor(scales[i] * in_shape[a]))
    else:
        raise ModelImportError("one of scales and sizes is required")
    return tuple(out_sizes), tuple(out_scales)


@converter("Resize", min_opset=10)
def resize(ctx: NodeContext) -> list[Value]:
    x = ctx.require(0, "X")
    rank = x.type.rank
    mode = ctx.attr_str("mode", "nearest")
    if mode not in MODES:
        raise ModelImportError(f"mode '{mode}' is not one of {', '.join(MODES)}")
    if ctx.opset < 11:
        scales = _floats(ctx.constant(1, "scales"))
        out_sizes, scales = resolve_sizes(x.type.shape, range(rank), scales, None, "stretch")
        attrs = ResizeAttrs(out_sizes, scales, mode, "asymmetric", "floor")
        return ctx.result("Resize", [x], attrs)
    given_axes = ctx.attr_ints("axes", None)
    axes = tuple(range(rank)) if given_axes is None else normalize_axes(given_axes, rank)
    roi = _floats(ctx.optional_constant(1, "roi"))
    scales = _floats(ctx.optional_constant(2, "scales"))
    sizes: tuple[int, ...] | None = ctx.constant_ints(3, "sizes") if ctx.input(3) is not None else None
    if sizes is not None and not sizes:
        sizes = None
    for what, values in (("scales", scales), ("sizes", sizes)):
        if values is not None and len(values) != len(axes):
            raise ModelImportError(f"{what} {list(values)} need one value per axis {list(axes)}")
    out_sizes, out_scales = resolve_sizes(x.type.shape, axes, scales, sizes,
                                          ctx.attr_str("keep_aspect_ratio_policy", "stretch"))
    if roi is not None and len(roi) == 2 * len(axes) and len(axes) != rank:
        full = [0.0] * rank + [1.0] * rank
        for i, a in enumerate(axes):
            full[a], full[a + rank] = roi[i], roi[i + len(axes)]
        roi = tuple(full)
    transform = ctx.attr_str("coordinate_transformation_mode", "half_pixel")
    nearest_mode = ctx.attr_str("nearest_mode", "round_prefer_floor")
    if transform not in TRANSFORMS or nearest_mode not in NEAREST_MODES:
        raise UnsupportedError(f"coordinate_transformation_mode '{transform}' or nearest_mode '{nearest_mode}' "
                               "is not supported")
    attrs = ResizeAttrs(out_sizes, out_scales, mode, transform, nearest_mode, ctx.attr_float("cubic_coeff_a", -0.75),
                        ctx.attr_bool("exclude_outside", False), ctx.attr_float("extrapolation_value", 0.0),
                        ctx.attr_bool("antialias", False), roi if transform == "tf_crop_and_resize" and roi else ())
    return ctx.result("Resize", [x], attrs)


@converter("Upsample", max_opset=9)
def upsample(ctx: NodeContext) -> list[Value]:
    x = ctx.require(0, "X")
    scales = ctx.attr_floats("scales") if ctx.opset < 9 else _floats(ctx.constant(1, "scales"))
    mode = ctx.attr_str("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear"):
        raise ModelImportError(f"mode '{mode}' is not nearest or linear")
    sizes, scales = resolve_sizes(x.type.shape, range(x.type.rank), scales, None, "stretch")
    attrs = ResizeAttrs(sizes, scales, "nearest" if mode == "nearest" else "linear", "asymmetric", "floor")
    return ctx.result("Resize", [x], attrs)
