"""Resampling kernels: Resize (every mode and coordinate transformation), GridSample and
AffineGrid.

Resize's shapes, scales and roi are static (the frontend folds them into the attributes), so
everything that depends on coordinates alone is decided at compile time: per resized axis
the reference's own tables (ops/resize.py `axis_taps`: the n input taps of each output
position, their weights, the positions outside a tf_crop_and_resize roi) become constant
tables of the kernel plan, and the C only gathers and weighs. Three variants, tried in order:

- resize_nearest_gather (mode nearest, any rank, any element type): one pass, each output
  row gathers through per-axis offset tables (an output row equal to the previous one is a
  memcpy, a row not resized along the last axis is one; integer scales along the last axis
  are plain repeat or stride loops the compiler vectorizes). Nearest only copies: a NaN or inf
  in the unselected neighbour does not leak into the result through its zero weight, as it
  does in the float64 reference's weighted sum (ONNX Runtime copies too).
- resize_bilinear_2d (mode linear with two taps, float, resizing only the last two axes, no
  position outside the roi): per [H, W] plane, input rows are interpolated along W once into
  a two-row cache, each output row is then a vectorized blend of two cached rows (or, where
  the plan estimates it cheaper, when downsampling along H, two input rows are blended first
  and the blend interpolated along W); planes (and row blocks of a plane when planes are
  fewer than threads) are split across threads.
- resize_separable (everything else: linear over other axes, cubic, antialias, exclude_outside,
  extrapolation, integers): the reference's algorithm, one pass per resized axis in axis
  order through scratch, each output element a weighted sum of its taps, vectorized along
  the contiguous inner axes; float32 computes in float, float64 and integers in double,
  integers rounded half to even and saturated at the end, as the reference does."""
from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass

import numpy as np

from ember.codegen.c_types import c_literal, c_type
from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.data_movement import copy_bytes
from ember.codegen.kernels.layouts import threads_for
from ember.codegen.kernels.registry import KernelOptions, KernelPlan, OpView, contiguous_strides
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.ops.resize import ResizeAttrs, axis_taps, resized_axes, skips_zero_taps
from ember.types import DType

# Resize refuses forms whose per-axis tables would exceed this many taps in all (antialiased
# downsampling by extreme factors: the taps per output grow as 1 / scale).
MAX_TABLE_TAPS = 1 << 24
INT32_LIMIT = 1 << 31
FLOATS = (DType.FLOAT32, DType.FLOAT64)


def kernel_table(layout: str, data: np.ndarray) -> tuple[str, str, np.ndarray]:
    """A plan table keyed by its content (select-kernels shares tables by layout and key)."""
    data = np.ascontiguousarray(data)
    digest = hashlib.sha1(f"{data.dtype}{data.shape}".encode() + data.tobytes()).hexdigest()[:16]
    return digest, layout, data


def thread_chunks(count: int, threads: int, body: list[str], var: str = "r") -> list[str]:
    """for each `var` in [0, count), split into `threads` contiguous chunks (one per thread);
    `body` may use `c`, the chunk number, to address per-thread scratch."""
    threads = max(1, min(threads, count))
    per = -(-count // threads)
    return [
        *([f"#pragma omp parallel for num_threads({threads}) schedule(static)"] if threads > 1 else []),
        f"for (long c = 0; c < {threads}; c++)",
        f"    for (long {var} = c * {per}; {var} < {count} && {var} < (c + 1) * {per}; {var}++) {{",
        *("        " + line for line in body),
        "    }",
    ]


# Resize: the tables ------------------------------------------------------------------------


@dataclass(frozen=True)
class AxisTable:
    """The reference's resampling of one axis: output j = sum_k coeffs[j, k] * in[taps[j, k]],
    or the extrapolation value where outside[j]."""

    axis: int
    size_in: int
    size_out: int
    taps: np.ndarray     # [size_out, n] int64, in [0, size_in)
    coeffs: np.ndarray   # [size_out, n] float64
    outside: np.ndarray  # [size_out] bool
    skip_zero: bool      # a tap of weight 0 contributes nothing (not 0 * inf = NaN)

    @property
    def n(self) -> int:
        return int(self.taps.shape[1])

    @property
    def guarded(self) -> bool:
        """Whether a tap of weight 0 must be skipped, not multiplied (ops/resize.py
        `skips_zero_taps`): only where the tables have such a tap, so other forms keep
        their unguarded loops."""
        return self.skip_zero and bool((self.coeffs == 0.0).any())


def _tap_count(attrs: ResizeAttrs, axis: int) -> int:
    """Taps per output position along `axis` (ops/resize.py `_coefficients`), without
    building the tables."""
    if attrs.mode == "nearest":
        return 2
    scale = attrs.scales[axis]
    if attrs.antialias and scale < 1.0:
        support = 1.0 if attrs.mode == "linear" else 2.0
        return 2 - 2 * (math.floor(-support / scale) + 1)
    return 2 if attrs.mode == "linear" else 4


@functools.lru_cache(maxsize=32)
def _axis_tables(attrs: ResizeAttrs, shape: tuple[int, ...]) -> tuple[AxisTable, ...]:
    tables = []
    for axis in resized_axes(attrs, shape):
        size_in, size_out = shape[axis], attrs.sizes[axis]
        taps, coeffs, outside = axis_taps(attrs, axis, size_in, size_out)
        flags = np.zeros(size_out, bool) if outside is None else np.asarray(outside, bool)
        tables.append(AxisTable(axis, size_in, size_out, np.asarray(taps, np.int64), np.asarray(coeffs, np.float64),
                                flags, skips_zero_taps(attrs, axis)))
    return tuple(tables)


def _resize_form(view: OpView) -> str | None:
    """What every Resize kernel needs (the element types are the precondition's)."""
    (y,) = view.results
    x = view.operand(0)
    attrs: ResizeAttrs = view.attrs
    if y.size == 0:
        return None
    taps = sum(attrs.sizes[a] * _tap_count(attrs, a) for a in resized_axes(attrs, x.shape))
    if taps > MAX_TABLE_TAPS:
        return (f"Resize {attrs.mode} with antialias at scales {list(attrs.scales)}: {taps} taps in its tables "
                f"(over {MAX_TABLE_TAPS})")
    return None


def _resize_tables(instr: Instr) -> tuple[AxisTable, ...]:
    out, x = instr.required()
    return _axis_tables(instr.attrs, tuple(x.type.shape))


def _acc_type(dtype: DType) -> DType:
    """What a weighted Resize computes in: float for float32, double otherwise."""
    return DType.FLOAT32 if dtype is DType.FLOAT32 else DType.FLOAT64


def _store(dtype: DType, expr: str) -> str:
    """`expr` (an accumulator value) as `dtype`: integers rounded half to even and saturated."""
    if dtype.is_float:
        return f"({c_type(dtype)})({expr})" if dtype is not DType.FLOAT32 else expr
    return f"ember_resize_to_{dtype.value}({expr})"


def _const_value(value: float, dtype: DType) -> str:
    """The reference's final conversion of a constant (the extrapolation value) to `dtype`."""
    if dtype.is_float:
        return c_literal(value, dtype)
    info = np.iinfo(dtype.numpy)
    return c_literal(int(np.clip(np.rint(value), info.min, info.max)), dtype)


def _saturating_casts() -> str:
    lines = []
    for dtype in (DType.INT8, DType.INT16, DType.INT32, DType.INT64, DType.UINT8, DType.UINT16, DType.UINT32,
                  DType.UINT64):
        info = np.iinfo(dtype.numpy)
        t = c_type(dtype)
        lines.append(f"static inline {t} ember_resize_to_{dtype.value}(double v) {{ v = rint(v); "
                     f"return v <= {float(info.min)!r} ? {c_literal(int(info.min), dtype)} : "
                     f"v >= {float(info.max)!r} ? {c_literal(int(info.max), dtype)} : ({t})v; }}")
    return "\n".join(lines)


def _work(instr: Instr) -> int:
    out = instr.required()[0]
    return out.type.size * max(1, sum(t.n for t in _resize_tables(instr)))


# Resize: nearest ---------------------------------------------------------------------------


def _nearest_offsets(table: AxisTable, stride: int) -> np.ndarray:
    """Element offsets of each output position's input along one axis: the tap whose weight
    is 1; -1 where the position is outside the roi, -2 where exclude_outside left no tap."""
    pick = np.argmax(table.coeffs, axis=1)
    chosen = table.taps[np.arange(table.size_out), pick] * stride
    zero = table.coeffs.max(axis=1) == 0.0
    return np.where(table.outside, -1, np.where(zero, -2, chosen))


def _nearest_row(offsets: np.ndarray, table: str, width: int, dtype: DType) -> str:
    """C: output row yr from input row xr along the last axis, through the offsets; regular
    patterns (the integer scales) as plain loops the compiler vectorizes, others gathered."""
    j = np.arange(width)
    first = int(offsets[0])
    if np.array_equal(offsets, first + j):
        return f"memcpy(yr, xr + {first}, {width * dtype.itemsize});"
    for f in range(2, 65):
        if width >= 2 and np.array_equal(offsets, first + j * f):
            return f"for (long j = 0; j < {width}; j++) yr[j] = xr[{first} + j * {f}];"
        if width >= f and np.array_equal(offsets, first + j // f):
            full = width // f
            copies = " ".join(f"yr[i * {f} + {k}] = v;" for k in range(f))
            tail = (f" for (long q = {full * f}; q < {width}; q++) yr[q] = xr[{first + full}];"
                    if width % f else "")
            return f"for (long i = 0; i < {full}; i++) {{ const {c_type(dtype)} v = xr[{first} + i]; {copies} }}{tail}"
    return f"for (long j = 0; j < {width}; j++) yr[j] = xr[{table}[j]];"


def _nearest_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    out, x = instr.required()
    strides = contiguous_strides(x.type.shape)
    wide = x.type.size >= INT32_LIMIT
    tables = [kernel_table("resize_nearest_offsets", _nearest_offsets(t, strides[t.axis]).astype(
        np.int64 if wide else np.int32)) for t in _resize_tables(instr)]
    rows = math.prod(out.type.shape[:-1]) if out.type.rank else 1
    threads = max(1, min(threads_for(options.num_threads, out.type.size), rows))
    return KernelPlan({"threads": threads}, tables=tables)


def _is_nearest(instr: Instr, options: KernelOptions) -> bool:
    return bool(instr.attrs.mode == "nearest")


def emit_resize_nearest(em: Emitter, instr: Instr) -> str:
    out, x = instr.required()
    if out.type.size == 0:
        return "/* empty result */"
    tables = _resize_tables(instr)
    if not tables:
        return copy_bytes(em, out, x)
    dtype = out.type.dtype
    t = c_type(dtype)
    shape_out, rank = out.type.shape, out.type.rank
    strides = contiguous_strides(x.type.shape)
    by_axis = {tb.axis: (i, tb) for i, tb in enumerate(tables)}
    fills = {-1: _const_value(instr.attrs.extrapolation_value, dtype), -2: _const_value(0.0, dtype)}
    width = shape_out[-1]
    rows = math.prod(shape_out[:-1])
    # The row's base offset and its fill (0: none, else the sentinel of the highest outer axis
    # with one: later axes overwrite what earlier ones wrote, as the reference's passes do).
    body = ["long rem = r, base = 0, fill = 0; (void)rem;"]
    for axis in range(rank - 2, -1, -1):
        dim = shape_out[axis]
        j = f"(rem % {dim})" if axis > 0 else "rem"
        if axis in by_axis:
            i, tb = by_axis[axis]
            offsets = _nearest_offsets(tb, strides[axis])
            if (offsets < 0).any():
                body.append(f"{{ long o = off{i}[{j}]; if (o < 0) {{ if (!fill) fill = o; }} else base += o; }}")
            else:
                body.append(f"base += off{i}[{j}];")
        elif dim > 1:
            body.append(f"base += {j} * {strides[axis]};")
        if axis > 0 and dim > 1:
            body.append(f"rem /= {dim};")
    body += [
        f"{t} *yr = y + r * {width};",
        "const long key = fill ? fill : base;",
        f"if (r > first && key == last) {{ memcpy(yr, yr - {width}, {width * dtype.itemsize}); continue; }}",
        "last = key;",
    ]
    fill_of = f"(fill == -1 ? {fills[-1]} : {fills[-2]})"
    if rank - 1 in by_axis:
        i, tb = by_axis[rank - 1]
        special = (_nearest_offsets(tb, 1) < 0).any()
        inner_fill = f"(o == -1 ? {fills[-1]} : {fills[-2]})"
        if special:
            body += [
                f"if (fill) {{ const {t} v = {fill_of}; for (long j = 0; j < {width}; j++) "
                f"{{ long o = off{i}[j]; yr[j] = o < 0 ? {inner_fill} : v; }} continue; }}",
                f"const {t} *xr = x + base;",
                f"for (long j = 0; j < {width}; j++) {{ long o = off{i}[j]; yr[j] = o < 0 ? {inner_fill} : xr[o]; }}",
            ]
        else:
            body += [
                f"if (fill) {{ const {t} v = {fill_of}; for (long j = 0; j < {width}; j++) yr[j] = v; continue; }}",
                f"const {t} *restrict xr = x + base;",
                _nearest_row(_nearest_offsets(tb, 1), f"off{i}", width, dtype),
            ]
    else:
        body += [
            f"if (fill) {{ const {t} v = {fill_of}; for (long j = 0; j < {width}; j++) yr[j] = v; continue; }}",
            f"memcpy(yr, x + base, {width * dtype.itemsize});",
        ]
    threads = param(instr, "threads", 1)
    per = -(-rows // max(1, min(threads, rows)))
    lines = [
        f"{t} *restrict y = {em.pointer(out)};",
        f"const {t} *restrict x = {em.pointer(x, const=True)};",
        *(f"const {'int64_t' if x.type.size >= INT32_LIMIT else 'int32_t'} *restrict off{i} = {em.table(instr, i)};"
          for i in range(len(tables))),
    ]
    loop_threads = max(1, min(threads, rows))
    lines += [
        *([f"#pragma omp parallel for num_threads({loop_threads}) schedule(static)"] if loop_threads > 1 else []),
        f"for (long c = 0; c < {loop_threads}; c++) {{",
        f"    const long first = c * {per}; long last = -3;",
        f"    for (long r = first; r < {rows} && r < first + {per}; r++) {{",
        *("        " + line for line in body),
        "    }",
        "}",
    ]
    return "\n".join(lines)


# Resize: bilinear over the last two axes ---------------------------------------------------


def _bilinear_form(instr: Instr) -> bool:
    out, x = instr.required()
    tables = _resize_tables(instr)
    rank = x.type.rank
    return (instr.attrs.mode == "linear" and out.type.dtype in FLOATS and bool(tables)
            and all(tb.axis >= rank - 2 and tb.n == 2 and not tb.outside.any() for tb in tables))


def _bilinear_geometry(instr: Instr) -> tuple[int, int, int, int, int, bool, bool]:
    """(planes, H, W, OH, OW, resize_h, resize_w) with the input seen as [planes, H, W]."""
    out, x = instr.required()
    shape, oshape = (1, 1, *x.type.shape)[-3:], (1, 1, *out.type.shape)[-3:]
    planes = math.prod(x.type.shape[:-2]) if x.type.rank > 2 else 1
    axes = {tb.axis - x.type.rank for tb in _resize_tables(instr)}
    return planes, shape[1], shape[2], oshape[1], oshape[2], -2 in axes, -1 in axes


def _bilinear_tasks(instr: Instr, threads: int) -> tuple[int, int]:
    """(row blocks per plane, tasks): planes, each split into enough row blocks to feed every
    thread when there are fewer planes than threads."""
    planes, h, w, oh, ow, rh, rw = _bilinear_geometry(instr)
    rows = oh if rh else h
    blocks = 1 if planes >= threads else min(rows, -(-threads // planes))
    return blocks, planes * blocks


def _bilinear_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    out, x = instr.required()
    acc = np.float32 if out.type.dtype is DType.FLOAT32 else np.float64
    tables = []
    for tb in _resize_tables(instr):
        tables.append(kernel_table("resize_linear_taps", tb.taps.T.astype(np.int32)))       # [2, size_out]
        tables.append(kernel_table("resize_linear_weights", tb.coeffs.T.astype(acc)))       # [2, size_out]
    threads = threads_for(options.num_threads, 2 * out.type.size)
    blocks, tasks = _bilinear_tasks(instr, threads)
    threads = max(1, min(threads, tasks))
    planes, h, w, oh, ow, rh, rw = _bilinear_geometry(instr)
    vertical_first = rh and rw and _vertical_first(instr)
    per_thread = (w if vertical_first else 2 * ow) if rh and rw else 0
    return KernelPlan({"threads": threads, "blocks": blocks, "order": "hw" if vertical_first else "wh"},
                      tables=tables, scratch_bytes=threads * per_thread * out.type.dtype.itemsize)


# A gathered tap (interpolating along W reads the input through index tables) against a
# contiguous, vectorized one (blending two rows): the relative cost the order is chosen by.
GATHER_COST = 4


def _vertical_first(instr: Instr) -> bool:
    """Blend rows first (then interpolate each blended row along W) rather than interpolate
    each needed input row along W once (then blend): cheaper when downsampling along H."""
    planes, h, w, oh, ow, rh, rw = _bilinear_geometry(instr)
    tb = _resize_tables(instr)[0]
    rows = len(np.unique(tb.taps))
    along_w_first = rows * ow * 2 * GATHER_COST + oh * ow * 2
    blend_first = oh * w * 2 + oh * ow * 2 * GATHER_COST
    return blend_first < along_w_first


def emit_resize_bilinear(em: Emitter, instr: Instr) -> str:
    out, x = instr.required()
    if out.type.size == 0:
        return "/* empty result */"
    t = c_type(out.type.dtype)
    planes, h, w, oh, ow, rh, rw = _bilinear_geometry(instr)
    threads, blocks = param(instr, "threads", 1), param(instr, "blocks", 1)
    tasks = planes * blocks
    rows = oh if rh else h
    lines = [
        f"{t} *restrict y = {em.pointer(out)};",
        f"const {t} *restrict x = {em.pointer(x, const=True)};",
    ]
    k = 0
    if rh:
        lines += [f"const int32_t *restrict hi0 = {em.table(instr, 0)}, *restrict hi1 = hi0 + {oh};",
                  f"const {t} *restrict hw0 = {em.table(instr, 1)}, *restrict hw1 = hw0 + {oh};"]
        k = 2
    if rw:
        lines += [f"const int32_t *restrict wi0 = {em.table(instr, k)}, *restrict wi1 = wi0 + {ow};",
                  f"const {t} *restrict ww0 = {em.table(instr, k + 1)}, *restrict ww1 = ww0 + {ow};"]

    def hrow(dst: str, src: str) -> str:
        return (f"{{ {t} *restrict d_ = {dst}; const {t} *restrict s_ = {src}; for (long j = 0; j < {ow}; j++) "
                f"d_[j] = ww0[j] * s_[wi0[j]] + ww1[j] * s_[wi1[j]]; }}")

    body = [
        f"const long p = t / {blocks}, blk = t % {blocks};",
        f"const long r0 = blk * {rows} / {blocks}, r1 = (blk + 1) * {rows} / {blocks};",
        f"const {t} *xp = x + p * {h * w};",
        f"{t} *yp = y + p * {oh * ow};",
    ]
    if not rh:  # rows kept: each one interpolated along W straight into the output
        body.append(f"for (long r = r0; r < r1; r++) {hrow(f'yp + r * {ow}', f'xp + r * {w}')}")
    else:
        blend = [
            f"const {t} a = hw0[r], b = hw1[r];",
            f"{t} *restrict yr = yp + r * {ow};",
            f"for (long j = 0; j < {ow}; j++) yr[j] = a * ra[j] + b * rb[j];",
        ]
        if not rw:
            body += ["for (long r = r0; r < r1; r++) {",
                     f"    const {t} *ra = xp + hi0[r] * {w}, *rb = xp + hi1[r] * {w};",
                     *("    " + line for line in blend), "}"]
        elif param(instr, "order", "wh") == "hw":
            # Downsampling along H: blend the two input rows, then interpolate along W.
            body += [
                "/* rows blended first, the blend interpolated along W */",
                f"{t} *restrict row = scratch + c * {w};",
                "for (long r = r0; r < r1; r++) {",
                f"    const {t} *ra = xp + hi0[r] * {w}, *rb = xp + hi1[r] * {w};",
                f"    const {t} a = hw0[r], b = hw1[r];",
                f"    for (long j = 0; j < {w}; j++) row[j] = a * ra[j] + b * rb[j];",
                "    " + hrow(f"yp + r * {ow}", "row"),
                "}",
            ]
            lines.append(f"{t} *scratch = ({t} *){em.scratch(instr)};")
        else:
            # Two cached rows interpolated along W (slots s0, s1 holding input rows c0, c1).
            body += [
                f"{t} *s0 = scratch + c * {2 * ow}, *s1 = s0 + {ow};",
                "long c0 = -1, c1 = -1;",
                "for (long r = r0; r < r1; r++) {",
                "    const long h0 = hi0[r], h1 = hi1[r];",
                f"    const {t} *ra = h0 == c0 ? s0 : h0 == c1 ? s1 : NULL;",
                f"    const {t} *rb = h1 == c0 ? s0 : h1 == c1 ? s1 : NULL;",
                "    if (!ra) {",
                "        if (rb == s0) { " + hrow("s1", f"xp + h0 * {w}") + " c1 = h0; ra = s1; }",
                "        else { " + hrow("s0", f"xp + h0 * {w}") + " c0 = h0; ra = s0; }",
                "    }",
                "    if (!rb) {",
                "        if (h1 == h0) rb = ra;",
                "        else if (ra == s0) { " + hrow("s1", f"xp + h1 * {w}") + " c1 = h1; rb = s1; }",
                "        else { " + hrow("s0", f"xp + h1 * {w}") + " c0 = h1; rb = s0; }",
                "    }",
                *("    " + line for line in blend),
                "}",
            ]
            lines.append(f"{t} *scratch = ({t} *){em.scratch(instr)};")
    lines += thread_chunks(tasks, threads, body, var="t")
    return "\n".join(lines)


# Resize: separable passes ------------------------------------------------------------------

# Float64 and integer Resize compute as the float64 reference does, operation for operation:
# no fused multiply-adds, each output the sum of its tap products in NumPy's order (along a
# contiguous axis NumPy's pairwise summation, along an outer axis one product after another),
# so integer results round exactly as the reference's. The pass runs out of line, compiled
# with contraction off.
SEPARABLE_HELPERS = """\
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif
/* Tap i's product; with skip_zero a tap of weight 0 adds 0 (not 0 * inf = NaN). */
#define EMBER_RESIZE_TAP(i) (skip_zero && tw[i] == 0. ? 0. : tw[i] * s[tx[i]])
/* NumPy's pairwise sum of the m products EMBER_RESIZE_TAP(i) (numpy/core pairwise_sum). */
static double ember_resize_pairwise(const double *s, const int64_t *tx, const double *tw, long m, int skip_zero) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
    if (m < 8) {
        double res = 0.;
        for (long i = 0; i < m; i++) res += EMBER_RESIZE_TAP(i);
        return res;
    }
    if (m <= 128) {
        double r[8];
        long i;
        for (int k = 0; k < 8; k++) r[k] = EMBER_RESIZE_TAP(k);
        for (i = 8; i < m - (m % 8); i += 8)
            for (int k = 0; k < 8; k++) r[k] += EMBER_RESIZE_TAP(i + k);
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < m; i++) res += EMBER_RESIZE_TAP(i);
        return res;
    }
    long m2 = m / 2;
    m2 -= m2 % 8;
    return ember_resize_pairwise(s, tx, tw, m2, skip_zero)
           + ember_resize_pairwise(s, tx + m2, tw + m2, m - m2, skip_zero);
}
/* Rows [r0, r1) of one pass: dst [outer, size_out, inner] from src [outer, size_in, inner]
   through n taps per output position (offsets ix, already times inner; ix < 0: outside). */
static void ember_resize_pass(double *restrict dst, const double *restrict src, long r0, long r1, long size_in,
                              long size_out, long inner, long n, const int64_t *restrict ix,
                              const double *restrict wt, double fill, int skip_zero) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
    long o = r0 / size_out, j = r0 % size_out;
    for (long r = r0; r < r1; r++) {
        const double *s = src + o * size_in * inner;
        double *d = dst + r * inner;
        const int64_t *tx = ix + j * n;
        const double *tw = wt + j * n;
        if (tx[0] < 0) {
            for (long i = 0; i < inner; i++) d[i] = fill;
        } else if (inner == 1) {
            d[0] = ember_resize_pairwise(s, tx, tw, n, skip_zero);
        } else {
            for (long i = 0; i < inner; i++) d[i] = skip_zero && tw[0] == 0. ? 0. : tw[0] * s[tx[0] + i];
            for (long q = 1; q < n; q++) {
                const double w = tw[q];
                const double *sq = s + tx[q];
                if (skip_zero && w == 0.) continue;
                for (long i = 0; i < inner; i++) d[i] += w * sq[i];
            }
        }
        if (++j == size_out) { j = 0; o++; }
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
"""


def _separable_passes(instr: Instr) -> list[tuple[AxisTable, int, int]]:
    """Per resized axis in order: (its table, outer, inner) of the pass's [outer, axis, inner]."""
    out, x = instr.required()
    shape = list(x.type.shape)
    passes = []
    for tb in _resize_tables(instr):
        passes.append((tb, math.prod(shape[:tb.axis]), math.prod(shape[tb.axis + 1:])))
        shape[tb.axis] = tb.size_out
    return passes


def _separable_scratch(instr: Instr) -> tuple[int, int, int, int]:
    """Elements (in the compute type) of: the two ping-pong buffers (the results of passes 1,
    3, ... and 2, 4, ... but the last), and for integers the input and the result in double."""
    out, x = instr.required()
    sizes = [0, 0]
    for k, (tb, outer, inner) in enumerate(_separable_passes(instr)[:-1]):
        sizes[k % 2] = max(sizes[k % 2], outer * tb.size_out * inner)
    ints = not out.type.dtype.is_float
    return sizes[0], sizes[1], x.type.size if ints else 0, out.type.size if ints else 0


def _separable_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    out, x = instr.required()
    acc = _acc_type(out.type.dtype)
    exact = acc is DType.FLOAT64
    tables = []
    for tb, outer, inner in _separable_passes(instr):
        taps = tb.taps * inner
        if tb.outside.any():
            taps[tb.outside, 0] = -1
        wide = exact or max(inner * tb.size_in, outer) >= INT32_LIMIT
        tables.append(kernel_table("resize_taps", taps.astype(np.int64 if wide else np.int32)))
        tables.append(kernel_table("resize_weights", tb.coeffs.astype(acc.numpy)))
    return KernelPlan({"threads": threads_for(options.num_threads, _work(instr))}, tables=tables,
                      scratch_bytes=sum(_separable_scratch(instr)) * acc.itemsize)


def emit_resize_separable(em: Emitter, instr: Instr) -> str:
    out, x = instr.required()
    if out.type.size == 0:
        return "/* empty result */"
    passes = _separable_passes(instr)
    if not passes:
        return copy_bytes(em, out, x)
    dtype = out.type.dtype
    t = c_type(dtype)
    threads = param(instr, "threads", 1)
    first, second, ins, outs = _separable_scratch(instr)
    extrapolation = instr.attrs.extrapolation_value
    if dtype is DType.FLOAT32:
        return _separable_float(em, instr, passes, threads, first, extrapolation)
    lines = [
        f"{t} *restrict y = {em.pointer(out)};",
        f"const {t} *restrict x = {em.pointer(x, const=True)};",
        f"double *buf0 = (double *){em.scratch(instr)}, *buf1 = buf0 + {first}, *bin = buf1 + {second}, "
        f"*bout = bin + {ins}; (void)buf0; (void)buf1; (void)bin; (void)bout;",
    ]
    ints = not dtype.is_float
    if ints:  # the input in double (exact), for passes that read and write double only
        lines += thread_chunks(x.type.size, threads if x.type.size >= 1 << 16 else 1, ["bin[e] = (double)x[e];"],
                               var="e")
    for k, (tb, outer, inner) in enumerate(passes):
        last = k == len(passes) - 1
        src = ("bin" if ints else "x") if k == 0 else f"buf{(k - 1) % 2}"
        dst = ("bout" if ints else "y") if last else f"buf{k % 2}"
        rows = outer * tb.size_out
        pass_threads = max(1, min(threads, rows))
        per = -(-rows // pass_threads)
        lines += [
            f"/* pass {k + 1}: axis {tb.axis}, {tb.size_in} -> {tb.size_out} ({tb.n} taps) */",
            *([f"#pragma omp parallel for num_threads({pass_threads}) schedule(static)"] if pass_threads > 1 else []),
            f"for (long c = 0; c < {pass_threads}; c++)",
            f"    ember_resize_pass({dst}, {src}, c * {per}, c * {per} + {per} < {rows} ? c * {per} + {per} : {rows}, "
            f"{tb.size_in}, {tb.size_out}, {inner}, {tb.n}, {em.table(instr, 2 * k)}, {em.table(instr, 2 * k + 1)}, "
            f"{c_literal(extrapolation, DType.FLOAT64)}, {int(tb.guarded)});",
        ]
    if ints:
        lines += thread_chunks(out.type.size, threads if out.type.size >= 1 << 16 else 1,
                         [f"y[e] = {_store(dtype, 'bout[e]')};"], var="e")
    return "\n".join(lines)


def _separable_float(em: Emitter, instr: Instr, passes: list[tuple[AxisTable, int, int]], threads: int,
                     first: int, extrapolation: float) -> str:
    """Float32: the same passes in float, vectorized along the inner axes."""
    out, x = instr.required()
    lines = [
        f"float *restrict y = {em.pointer(out)};",
        f"const float *restrict x = {em.pointer(x, const=True)};",
        f"float *buf0 = (float *){em.scratch(instr)}, *buf1 = buf0 + {first}; (void)buf0; (void)buf1;",
    ]
    fill = c_literal(extrapolation, DType.FLOAT32)
    for k, (tb, outer, inner) in enumerate(passes):
        last = k == len(passes) - 1
        src = "x" if k == 0 else f"buf{(k - 1) % 2}"
        dst = "y" if last else f"buf{k % 2}"
        n, size_in, size_out = tb.n, tb.size_in, tb.size_out
        idx_t = "int64_t" if max(inner * size_in, outer) >= INT32_LIMIT else "int32_t"
        outside = bool(tb.outside.any())

        def tap(w: str, v: str, guarded: bool = tb.guarded) -> str:
            return f"({w} == 0.0f ? 0.0f : {w} * {v})" if guarded else f"{w} * {v}"

        lines.append(f"{{ /* pass {k + 1}: axis {tb.axis}, {size_in} -> {size_out} ({n} taps) */")
        lines.append(f"const {idx_t} *restrict ix = {em.table(instr, 2 * k)};")
        lines.append(f"const float *restrict wt = {em.table(instr, 2 * k + 1)};")
        if inner == 1:
            body = [
                f"const float *restrict s = {src} + o * {size_in};",
                f"float *restrict d = {dst} + o * {size_out};",
                f"for (long j = 0; j < {size_out}; j++) {{",
                f"    const {idx_t} *tx = ix + j * {n}; const float *tw = wt + j * {n};",
                *([f"    if (tx[0] < 0) {{ d[j] = {fill}; continue; }}"] if outside else []),
                f"    float v = {tap('tw[0]', 's[tx[0]]')};",
                f"    for (long q = 1; q < {n}; q++) v += {tap('tw[q]', 's[tx[q]]')};",
                "    d[j] = v;",
                "}",
            ]
            lines += thread_chunks(outer, threads, body, var="o")
        else:
            body = [
                f"const long o = r / {size_out}, j = r % {size_out};",
                f"const float *restrict s = {src} + o * {size_in * inner};",
                f"float *restrict d = {dst} + r * {inner};",
                f"const {idx_t} *tx = ix + j * {n}; const float *tw = wt + j * {n};",
                *([f"if (tx[0] < 0) {{ for (long i = 0; i < {inner}; i++) d[i] = {fill}; continue; }}"]
                  if outside else []),
                "{ const float w = tw[0]; const float *restrict sq = s + tx[0]; "
                f"for (long i = 0; i < {inner}; i++) d[i] = {tap('w', 'sq[i]')}; }}",
                f"for (long q = 1; q < {n}; q++) {{ const float w = tw[q]; const float *restrict sq = s + tx[q]; "
                + ("if (w == 0.0f) continue; " if tb.guarded else "")
                + f"for (long i = 0; i < {inner}; i++) d[i] += w * sq[i]; }}",
            ]
            lines += thread_chunks(outer * size_out, threads, body, var="r")
        lines.append("}")
    return "\n".join(lines)


C_KERNELS.kernel("resize_nearest_gather", "Resize", accepts=_resize_form, applies=_is_nearest,
                 plan=_nearest_plan)(emit_resize_nearest)
C_KERNELS.kernel("resize_bilinear_2d", "Resize", accepts=_resize_form,
                 applies=lambda instr, options: _bilinear_form(instr), plan=_bilinear_plan)(emit_resize_bilinear)
C_KERNELS.kernel("resize_separable", "Resize", accepts=_resize_form, plan=_separable_plan,
                 preamble=_saturating_casts() + "\n" + SEPARABLE_HELPERS)(emit_resize_separable)
