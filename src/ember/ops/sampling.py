"""Spatial sampling ops: GridSample (nearest, linear or cubic sampling of an N-D input at
normalized grid coordinates, with zeros / border / reflection padding) and AffineGrid (the
sampling grid of a batch of affine transforms). Computed in float64."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import require_float

MODES = ("nearest", "linear", "cubic")
PADDINGS = ("zeros", "border", "reflection")
CUBIC_A = -0.75  # Keys' cubic convolution, as PyTorch and ONNX use


@dataclass(frozen=True)
class GridSampleAttrs:
    mode: str = "linear"
    padding_mode: str = "zeros"
    align_corners: bool = False


def _grid_sample_infer(attrs: GridSampleAttrs, types):
    x, grid = types
    require_float(x, "GridSample")
    spatial = x.rank - 2
    if attrs.mode not in MODES or attrs.padding_mode not in PADDINGS:
        raise OpError(f"GridSample mode '{attrs.mode}' / padding '{attrs.padding_mode}' is not supported")
    if spatial < 1 or grid.rank != x.rank or grid.shape[0] != x.shape[0] or grid.shape[-1] != spatial:
        raise OpError(f"GridSample grid {grid} does not fit input {x} ([N, *out, {spatial}])")
    out = x.with_shape(x.shape[:2] + grid.shape[1:-1])
    if 0 in x.shape[2:] and out.size:
        raise OpError(f"GridSample input {x} has an empty spatial axis: no pixel to sample for output {out}")
    return (out,)


def _reflect(v: np.ndarray, low: float, high: float) -> np.ndarray:
    """Reflects coordinates off the borders until they lie in [low, high]."""
    span = high - low
    if span <= 0:
        return np.full_like(v, low)
    below, above = v < low, v > high
    dist = np.where(below, low - v, np.where(above, v - high, 0.0))
    flips = np.floor(dist / span)
    rest = dist - flips * span
    even = flips % 2 == 0
    return np.where(below, np.where(even, low + rest, high - rest),
                    np.where(above, np.where(even, high - rest, low + rest), v))


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    a = CUBIC_A

    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _grid_sample(attrs: GridSampleAttrs, arrays):
    x, grid = arrays
    n, c = x.shape[:2]
    dims = x.shape[2:]
    coords = grid.astype(np.float64)[..., ::-1]  # the grid lists the innermost axis first
    taps_per_axis = []
    for i, d in enumerate(dims):
        u = coords[..., i]
        u = (u + 1) / 2 * (d - 1) if attrs.align_corners else ((u + 1) * d - 1) / 2
        if attrs.mode == "nearest":
            u = np.rint(u)  # half to even, as PyTorch
        low, high = (0.0, d - 1.0) if attrs.align_corners else (-0.5, d - 0.5)
        if attrs.padding_mode == "border":
            u = np.where((u < low) | (u > high), np.clip(u, 0, d - 1), u)
        elif attrs.padding_mode == "reflection":
            u = _reflect(u, low, high)
        if attrs.mode == "nearest":
            taps = [(np.trunc(u).astype(np.int64), np.ones_like(u))]
        else:
            base = np.floor(u)
            t = u - base
            base = base.astype(np.int64)
            if attrs.mode == "linear":
                taps = [(base, 1 - t), (base + 1, t)]
            else:
                taps = [(base + k - 1, w) for k, w in enumerate(_cubic_weights(t))]
        taps_per_axis.append([(_pad_index(idx, d, low, high, attrs.padding_mode), w) for idx, w in taps])
    data = np.moveaxis(x.astype(np.float64), 1, -1)  # [N, *dims, C]
    batch = np.arange(n).reshape((n,) + (1,) * (grid.ndim - 2))
    out = np.zeros(grid.shape[:-1] + (c,))
    for combo in itertools.product(*taps_per_axis):
        weight = np.ones(grid.shape[:-1])
        valid = np.ones(grid.shape[:-1], dtype=bool)
        index = [batch]
        for (idx, inside), w in combo:
            weight = weight * w
            valid &= inside
            index.append(idx)
        values = data[tuple(index)]
        out += np.where(valid[..., None], values, 0.0) * weight[..., None]
    return (np.moveaxis(out, -1, 1).astype(x.dtype),)


def _pad_index(idx: np.ndarray, d: int, low: float, high: float, padding: str):
    """(index clamped into range, whether the tap reads real data) for one axis."""
    if padding == "reflection":
        idx = np.trunc(_reflect(idx.astype(np.float64), low, high)).astype(np.int64)
    inside = (idx >= 0) & (idx < d) if padding == "zeros" else np.ones(idx.shape, bool)
    return np.clip(idx, 0, d - 1), inside


define_op(OpDef("GridSample", ("x", "grid"), ("y",), _grid_sample_infer, _grid_sample, attrs=GridSampleAttrs))


@dataclass(frozen=True)
class AffineGridAttrs:
    """size: the [N, C, H, W] or [N, C, D, H, W] of the input the grid samples."""

    size: tuple[int, ...]
    align_corners: bool = False


def _affine_grid_infer(attrs: AffineGridAttrs, types):
    (theta,) = types
    require_float(theta, "AffineGrid")
    spatial = len(attrs.size) - 2
    if spatial not in (2, 3) or theta.shape != (attrs.size[0], spatial, spatial + 1):
        raise OpError(f"AffineGrid theta {theta} does not fit size {list(attrs.size)}")
    if min(attrs.size) < 0:
        raise OpError(f"AffineGrid size {list(attrs.size)} has a negative dimension")
    return (theta.with_shape((attrs.size[0],) + attrs.size[2:] + (spatial,)),)


def _affine_grid(attrs: AffineGridAttrs, arrays):
    (theta,) = arrays
    dims = attrs.size[2:]
    axes = []
    for d in dims:
        if attrs.align_corners:
            axes.append(np.linspace(-1.0, 1.0, d) if d > 1 else np.array([-1.0]))
        else:
            axes.append((np.arange(d) * 2 + 1) / d - 1)
    mesh = np.meshgrid(*axes, indexing="ij")  # one array per axis, outermost first
    # Homogeneous coordinates, innermost axis first: (x, y[, z], 1).
    homo = np.stack(list(mesh[::-1]) + [np.ones(dims)], axis=-1).reshape(-1, len(dims) + 1)
    grid = np.einsum("nij,pj->npi", theta.astype(np.float64), homo)
    return (grid.reshape((theta.shape[0],) + tuple(dims) + (len(dims),)).astype(theta.dtype),)


define_op(OpDef("AffineGrid", ("theta",), ("grid",), _affine_grid_infer, _affine_grid, attrs=AffineGridAttrs))

__all__ = ["AffineGridAttrs", "GridSampleAttrs"]
