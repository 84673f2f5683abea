"""Sampling kernels: GridSample and AffineGrid (Resize's neighbours in codegen/kernels/resize.py,
whose table and threading helpers they share).

GridSample computes each output point's taps (offsets into the input plane, weights, and
whether a tap reads real data under zeros padding) in double, exactly as the float64
reference does (with its NaN and overflow behaviour, without C's undefined conversions),
for a block of points at a time, then applies them to every channel. AffineGrid is the
reference's matrix product with base coordinates from a compile-time table."""
from __future__ import annotations

import itertools
import math

import numpy as np

from ember.codegen.c_types import c_type
from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.layouts import threads_for
from ember.codegen.kernels.registry import KernelOptions, KernelPlan, OpView, contiguous_strides
from ember.codegen.kernels.resize import FLOATS, INT32_LIMIT, kernel_table, thread_chunks
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr

# GridSample ---------------------------------------------------------------------------------

MAX_SPATIAL = 3
GRID_TAPS = {"nearest": 1, "linear": 2, "cubic": 4}


def _grid_form(view: OpView) -> str | None:
    x, grid = view.operand(0), view.operand(1)
    spatial = x.rank - 2
    if not 1 <= spatial <= MAX_SPATIAL:
        return f"GridSample over {spatial} spatial axes (the kernel takes 1 to {MAX_SPATIAL}): {x}"
    if x.dtype not in FLOATS or grid.dtype not in FLOATS:
        return f"the GridSample kernel runs float32 and float64, not {x.dtype} with a {grid.dtype} grid"
    if view.results[0].size and 0 in x.shape[2:]:
        return f"GridSample of {x} to {list(view.results[0].shape)}: an empty input has no values to sample"
    return None


def _grid_geometry(instr: Instr) -> tuple[int, int, tuple[int, ...], int, int, int]:
    """(N, C, input spatial dims, output points per batch, taps per point, points per block)."""
    out, x, grid = instr.required()
    n, c, *dims = x.type.shape
    points = math.prod(grid.type.shape[1:-1])
    taps = GRID_TAPS[instr.attrs.mode] ** len(dims)
    block = max(16, 4096 // taps)
    return n, c, tuple(dims), points, taps, block


def _grid_scratch(instr: Instr) -> int:
    """Bytes of one thread's scratch: a block of points' tap offsets, then their weights."""
    out, x, grid = instr.required()
    n, c, dims, points, taps, block = _grid_geometry(instr)
    wide = math.prod(dims) >= INT32_LIMIT
    return block * taps * ((8 if wide else 4) + out.type.dtype.itemsize)


def _grid_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    out, x, grid = instr.required()
    n, c, dims, points, taps, block = _grid_geometry(instr)
    tasks = n * -(-points // block)
    threads = max(1, min(threads_for(options.num_threads, out.type.size * taps), tasks))
    return KernelPlan({"threads": threads}, scratch_bytes=threads * _grid_scratch(instr) if out.type.size else 0)


GRID_HELPERS = """\
/* GridSample (ops/sampling.py): reflect v off [low, high] until it lies inside. */
static inline double ember_gs_reflect(double v, double low, double high) {
    const double span = high - low;
    if (span <= 0) return low;
    if (v < low) { const double dist = low - v, flips = floor(dist / span), rest = dist - flips * span;
                   return fmod(flips, 2.0) == 0 ? low + rest : high - rest; }
    if (v > high) { const double dist = v - high, flips = floor(dist / span), rest = dist - flips * span;
                    return fmod(flips, 2.0) == 0 ? high - rest : low + rest; }
    return v;
}
/* NumPy's float64 -> int64 conversion on x86 (out of range and NaN give INT64_MIN), kept in
   double: every later step (a tap offset, reflection, clipping) reads the same value. */
static inline double ember_gs_int(double v) {
    return (v > -9223372036854775808.0 && v < 9223372036854775808.0) ? v : -9223372036854775808.0;
}
static inline double ember_gs_cubic_near(double d) { return ((-0.75 + 2) * d - (-0.75 + 3)) * d * d + 1; }
static inline double ember_gs_cubic_far(double d) {
    return ((-0.75 * d - 5 * -0.75) * d + 8 * -0.75) * d - 4 * -0.75;
}"""


def emit_grid_sample(em: Emitter, instr: Instr) -> str:
    out, x, grid = instr.required()
    if out.type.size == 0:
        return "/* empty result */"
    attrs = instr.attrs
    n, c, dims, points, taps, block = _grid_geometry(instr)
    spatial = len(dims)
    t, g = c_type(out.type.dtype), c_type(grid.type.dtype)
    idx_t = "int64_t" if math.prod(dims) >= INT32_LIMIT else "int32_t"
    per_axis = GRID_TAPS[attrs.mode]
    strides = contiguous_strides(dims)
    blocks = -(-points // block)
    threads = param(instr, "threads", 1)
    align, padding = attrs.align_corners, attrs.padding_mode
    # Per axis i (outermost first; the grid lists the innermost axis first): the taps' clipped
    # indices ix{i}_{k}, weights w{i}_{k} and validity v{i}_{k}, all from the float64 reference.
    point = [f"const {g} *gp = grid + (b * {points} + p) * {spatial};"]
    for i, d in enumerate(dims):
        low, high = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
        u = f"u{i}"
        point.append(f"double {u} = (double)gp[{spatial - 1 - i}];")
        if align:
            point.append(f"{u} = ({u} + 1) / 2 * {float(d - 1)!r};")
        else:
            point.append(f"{u} = (({u} + 1) * {float(d)!r} - 1) / 2;")
        if attrs.mode == "nearest":
            point.append(f"{u} = rint({u});")
        if padding == "border":
            point.append(f"if ({u} < {low!r} || {u} > {high!r}) {u} = fmin(fmax({u}, 0.0), {float(d - 1)!r});")
        elif padding == "reflection":
            point.append(f"{u} = ember_gs_reflect({u}, {low!r}, {high!r});")
        if attrs.mode == "nearest":
            point.append(f"const double f{i}_0 = ember_gs_int(trunc({u})), w{i}_0 = 1.0;")
        else:
            point.append(f"const double base{i} = floor({u}), t{i} = {u} - base{i}, bi{i} = ember_gs_int(base{i});")
            if attrs.mode == "linear":
                point.append(f"const double f{i}_0 = bi{i}, f{i}_1 = bi{i} + 1, w{i}_0 = 1 - t{i}, w{i}_1 = t{i};")
            else:
                point.append(f"const double f{i}_0 = bi{i} - 1, f{i}_1 = bi{i}, f{i}_2 = bi{i} + 1, "
                             f"f{i}_3 = bi{i} + 2;")
                point.append(f"const double w{i}_0 = ember_gs_cubic_far(t{i} + 1), w{i}_1 = ember_gs_cubic_near(t{i}), "
                             f"w{i}_2 = ember_gs_cubic_near(1 - t{i}), w{i}_3 = ember_gs_cubic_far(2 - t{i});")
        for k in range(per_axis):
            f = f"f{i}_{k}"
            if padding == "reflection":
                point.append(f"const double r{i}_{k} = trunc(ember_gs_reflect({f}, {low!r}, {high!r}));")
                f = f"r{i}_{k}"
            valid = f"({f} >= 0 && {f} < {float(d)!r})" if padding == "zeros" else "1"
            point.append(f"const int v{i}_{k} = {valid}; "
                         f"const long ix{i}_{k} = (long)fmin(fmax({f}, 0.0), {float(d - 1)!r});")
    for q, combo in enumerate(itertools.product(range(per_axis), repeat=spatial)):
        weight = "1.0"
        for i, k in enumerate(combo):
            weight = f"({weight} * w{i}_{k})"
        offset = " + ".join(f"ix{i}_{k} * {strides[i]}" if strides[i] != 1 else f"ix{i}_{k}"
                            for i, k in enumerate(combo))
        valid = " && ".join(f"v{i}_{k}" for i, k in enumerate(combo))
        point.append(f"off[{q * block} + q] = ({valid}) ? ({idx_t})({offset}) : -1; "
                     f"wt[{q * block} + q] = ({t}){weight};")
    plane = math.prod(dims)
    body = [
        f"const long b = task / {blocks}, p0 = (task % {blocks}) * {block};",
        f"const long count = {points} - p0 < {block} ? {points} - p0 : {block};",
        f"{idx_t} *restrict off = ({idx_t} *)(scratch + c * {_grid_scratch(instr)});",
        f"{t} *restrict wt = ({t} *)(off + {block * taps});",
        "for (long q = 0; q < count; q++) {",
        "    const long p = p0 + q;",
        *("    " + line for line in point),
        "}",
        f"for (long ch = 0; ch < {c}; ch++) {{",
        f"    const {t} *restrict xc = x + (b * {c} + ch) * {plane};",
        f"    {t} *restrict yc = y + (b * {c} + ch) * {points} + p0;",
        "    for (long q = 0; q < count; q++) {",
        f"        {t} acc = 0;",
        f"        for (long k = 0; k < {taps}; k++) {{ const {idx_t} o = off[k * {block} + q]; "
        f"const {t} v = o >= 0 ? xc[o] : 0; acc += v * wt[k * {block} + q]; }}",
        "        yc[q] = acc;",
        "    }",
        "}",
    ]
    lines = [
        f"{t} *restrict y = {em.pointer(out)};",
        f"const {t} *restrict x = {em.pointer(x, const=True)};",
        f"const {g} *restrict grid = {em.pointer(grid, const=True)};",
        f"uint8_t *scratch = (uint8_t *){em.scratch(instr)};",
        *thread_chunks(n * blocks, threads, body, var="task"),
    ]
    return "\n".join(lines)


C_KERNELS.kernel("grid_sample_taps", "GridSample", accepts=_grid_form, plan=_grid_plan,
                 preamble=GRID_HELPERS)(emit_grid_sample)


# AffineGrid ---------------------------------------------------------------------------------


def _affine_form(view: OpView) -> str | None:
    theta = view.operand(0)
    if theta.dtype not in FLOATS:
        return f"the AffineGrid kernel runs float32 and float64, not {theta.dtype}"
    return None


def _affine_axes(size: tuple[int, ...], align_corners: bool) -> np.ndarray:
    """The reference's base coordinates of every spatial axis, outermost first, concatenated."""
    axes = []
    for d in size[2:]:
        if align_corners:
            axes.append(np.linspace(-1.0, 1.0, d) if d > 1 else np.array([-1.0]))
        else:
            axes.append((np.arange(d) * 2 + 1) / d - 1)
    return np.concatenate(axes).astype(np.float64) if axes else np.zeros(0)


def _affine_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    axes = _affine_axes(instr.attrs.size, instr.attrs.align_corners)
    return KernelPlan({}, tables=[kernel_table("affine_grid_axes", axes)] if axes.size else [])


def emit_affine_grid(em: Emitter, instr: Instr) -> str:
    out, theta = instr.required()
    if out.type.size == 0:
        return "/* empty result */"
    dims = instr.attrs.size[2:]
    spatial = len(dims)
    n = theta.type.shape[0]
    t = c_type(out.type.dtype)
    starts = np.cumsum([0, *dims[:-1]])
    # Homogeneous coordinates (innermost axis first, then 1): h[j] for j < spatial is the
    # coordinate of axis spatial-1-j.
    lines = [
        f"{t} *restrict y = {em.pointer(out)};",
        f"const {t} *restrict theta = {em.pointer(theta, const=True)};",
        f"const double *restrict base = {em.table(instr)};",
        f"for (long b = 0; b < {n}; b++) {{",
        f"    const {t} *th = theta + b * {spatial * (spatial + 1)};",
        f"    {t} *yb = y + b * {math.prod(dims) * spatial};",
        "    long p = 0;",
    ]
    for i, d in enumerate(dims):
        lines.append("    " * (i + 1) + f"for (long a{i} = 0; a{i} < {d}; a{i}++) {{")
    indent = "    " * (spatial + 1)
    h = [f"base[{starts[spatial - 1 - j]} + a{spatial - 1 - j}]" for j in range(spatial)]
    for i in range(spatial):
        terms = " + ".join(f"(double)th[{i * (spatial + 1) + j}] * {h[j]}" for j in range(spatial))
        lines.append(f"{indent}yb[p * {spatial} + {i}] = ({t})({terms} + (double)th[{i * (spatial + 1) + spatial}]);")
    lines.append(f"{indent}p++;")
    for i in range(spatial - 1, -1, -1):
        lines.append("    " * (i + 1) + "}")
    lines.append("}")
    return "\n".join(lines)


C_KERNELS.kernel("affine_grid_loops", "AffineGrid", accepts=_affine_form, plan=_affine_plan)(emit_affine_grid)
