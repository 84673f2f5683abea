"""Softmax, LogSoftmax and LayerNormalization as single kernels: each row is read twice or
three times from L1 instead of once per lowered op, and exp runs through the vectorizable
ember_expf. The primitive normalizations (InstanceNormalization, GroupNormalization,
MeanVarianceNormalization, LpNormalization, RMSNormalization, LRN, Hardmax) run float32 and
float64 with their statistics in double, as the NumPy references do. Rows are split across
threads when there is enough work."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ember.codegen.c_types import c_literal, c_type
from ember.codegen.emitter import Emitter, param, threads_pragma
from ember.codegen.kernels.layouts import threads_for
from ember.codegen.kernels.registry import (
    KernelOptions,
    KernelPlan,
    OpView,
    broadcast_strides,
    collapse,
    contiguous_strides,
    is_whole_weight,
    loop_nest,
)
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Buffer, Instr
from ember.ops.normalization import MVN_EPSILON
from ember.ops.shape_util import normalize_axes, normalize_axis
from ember.types import DType, TensorType


def accepts(view: OpView) -> str | None:
    """float32 rows; LayerNormalization's scale and bias either cover the normalized axes or
    are constants (broadcast at compile time)."""
    x = view.operand(0)
    if x.dtype is not DType.FLOAT32:
        return "the normalization kernels run float32 (other types are lowered)"
    if view.op == "LayerNormalization":
        size = math.prod(x.shape[normalize_axis(view.attrs.axis, x.rank):])
        params = zip(view.operands[1:], view.constant[1:], strict=True)
        if not all(t is None or constant or t.size == size for t, constant in params):
            return "LayerNormalization with broadcast, non-constant scale or bias is lowered"
    return None


def _rows(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def _parallel(instr: Instr) -> str:
    if param(instr, "threads", 1) == 1:
        return ""
    return f"#pragma omp parallel for {threads_pragma(instr)} schedule(static)"


def _softmax_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    x = instr.operand(1)
    return KernelPlan({"threads": threads_for(options.num_threads, x.type.size * 8)})


@C_KERNELS.kernel("softmax_rows", "Softmax", "LogSoftmax", accepts=accepts, plan=_softmax_plan)
def emit_softmax(em: Emitter, instr: Instr) -> str:
    out, x = instr.required()
    axis = normalize_axis(instr.attrs.axis, x.type.rank)
    outer, n, inner = _rows(x.type.shape, axis)
    log = instr.name == "LogSoftmax"
    pointers = [f"const float *x = {em.pointer(x, const=True)};", f"float *y = {em.pointer(out)};"]
    if inner == 1:
        return "\n".join(line for line in [*pointers, _parallel(instr), f"for (long row = 0; row < {outer}; row++) {{",
                                            *_softmax_contiguous_row(n, log), "}"] if line)
    finish = ("for (long j = 0; j < n_; j++) yr[j * st] = yr[j * st] - lse;" if log
              else "for (long j = 0; j < n_; j++) yr[j * st] *= inv;")
    return "\n".join(line for line in [
        *pointers,
        f"const long n_ = {n}, st = {inner};",
        _parallel(instr),
        f"for (long row = 0; row < {outer * inner}; row++) {{",
        f"    const float *xr = x + (row / {inner}) * {n * inner} + row % {inner};",
        f"    float *yr = y + (row / {inner}) * {n * inner} + row % {inner};",
        "    float peak = xr[0];",
        "    for (long j = 1; j < n_; j++) peak = xr[j * st] > peak ? xr[j * st] : peak;",
        "    float sum = 0.0f;",
        ("    for (long j = 0; j < n_; j++) { yr[j * st] = xr[j * st] - peak; sum += ember_expf(yr[j * st]); }"
         if log else
         "    for (long j = 0; j < n_; j++) { float e = ember_expf(xr[j * st] - peak); yr[j * st] = e; sum += e; }"),
        "    float inv = 1.0f / sum, lse = logf(sum); (void)inv; (void)lse;",
        f"    {finish}",
        "}",
    ] if line)


def _softmax_contiguous_row(n: int, log: bool) -> list[str]:
    """The body over one contiguous row (x + row * n): the peak and the sum kept in SUM_LANES
    partial lanes, and exp in a loop of its own, so all of it vectorizes (a single scalar
    accumulator keeps the compiler from reordering, and the row to one element at a time:
    attention's 128-wide rows ran at 1.5 ns an element)."""
    lines = [f"    const float *xr = x + row * {n};", f"    float *yr = y + row * {n};", *_lane_max("peak", "xr[j]", n)]
    if log:
        lines += [f"    for (long j = 0; j < {n}; j++) yr[j] = xr[j] - peak;",
                  *_lane_sum("sum", "ember_expf(yr[j])", n),
                  "    float lse = logf(sum);",
                  f"    for (long j = 0; j < {n}; j++) yr[j] -= lse;"]
    else:
        lines += [f"    for (long j = 0; j < {n}; j++) yr[j] = ember_expf(xr[j] - peak);",
                  *_lane_sum("sum", "yr[j]", n),
                  "    float inv = 1.0f / sum;",
                  f"    for (long j = 0; j < {n}; j++) yr[j] *= inv;"]
    return lines


def _layer_norm_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    """Scale and bias that broadcast over the normalized axes are expanded at compile time
    into packed copies ("broadcast" layout), so the row loop reads them contiguously."""
    x, params = instr.operand(1), instr.base_operands[2:]
    axis = normalize_axis(instr.attrs.axis, x.type.rank)
    tail = x.type.shape[axis:]
    packed = []
    for value in params:
        if value is not None and value.type.size != math.prod(tail) and is_whole_weight(value):
            full = np.ascontiguousarray(np.broadcast_to(value.constant(), tail).astype(np.float32))
            packed.append((value, "broadcast", full))
    return KernelPlan({"threads": threads_for(options.num_threads, x.type.size * 4)}, packed=packed)


# Partial sums a row reduction keeps: one vector's lanes, so that the compiler (which may not
# reorder a float sum) still vectorizes it instead of chaining one add per element.
SUM_LANES = 16


def _lane_reduce(name: str, term: str, size: int, init: str, fold) -> list[str]:
    """Row-loop lines declaring `float name` = `term` over j < size folded with
    `fold(accumulator, value)` (a C expression) from `init`: SUM_LANES partial results over
    whole blocks of lanes, the tail into the first, then folded pairwise."""
    whole = size // SUM_LANES * SUM_LANES
    if whole == 0:
        return [f"    float {name} = {init};", f"    for (long j = 0; j < {size}; j++) {name} = {fold(name, term)};"]
    lane = f"{name}_lanes[j - j0]"
    lines = [f"    float {name}_lanes[{SUM_LANES}];",
             f"    for (int l = 0; l < {SUM_LANES}; l++) {name}_lanes[l] = {init};",
             f"    for (long j0 = 0; j0 < {whole}; j0 += {SUM_LANES})",
             f"        for (long j = j0; j < j0 + {SUM_LANES}; j++) {lane} = {fold(lane, term)};"]
    if whole < size:
        first = f"{name}_lanes[0]"
        lines.append(f"    for (long j = {whole}; j < {size}; j++) {first} = {fold(first, term)};")
    pair = fold(f"{name}_lanes[l]", f"{name}_lanes[l + w]")
    lines += [f"    for (int w = {SUM_LANES // 2}; w > 0; w /= 2)",
              f"        for (int l = 0; l < w; l++) {name}_lanes[l] = {pair};",
              f"    float {name} = {name}_lanes[0];"]
    return lines


def _lane_sum(name: str, term: str, size: int) -> list[str]:
    return _lane_reduce(name, term, size, "0.0f", lambda a, b: f"{a} + {b}")


def _lane_max(name: str, term: str, size: int) -> list[str]:
    """The peak (NaNs skipped, as a `>` comparison skips them; -inf for an empty row)."""
    return _lane_reduce(name, term, size, "-INFINITY", lambda a, b: f"({b} > {a} ? {b} : {a})")


@C_KERNELS.kernel("layer_norm_rows", "LayerNormalization", accepts=accepts, plan=_layer_norm_plan)
def emit_layer_norm(em: Emitter, instr: Instr) -> str:
    out, x = instr.operand(0), instr.operand(1)
    scale, bias = (instr.base_operands[2:] + [None] * 2)[:2]
    axis = normalize_axis(instr.attrs.axis, x.type.rank)
    tail = x.type.shape[axis:]
    rows, size = math.prod(x.type.shape[:axis]), math.prod(tail)
    packed = iter(range(2))

    def pointer(value) -> str | None:
        if value is None:
            return None
        return em.pointer(value, const=True) if value.type.size == size else em.packed(instr, next(packed))

    scale_ptr, bias_ptr = pointer(scale), pointer(bias)
    eps = c_literal(instr.attrs.epsilon, DType.FLOAT32)
    return "\n".join(line for line in [
        f"const float *x = {em.pointer(x, const=True)};",
        f"float *y = {em.pointer(out)};",
        f"const float *scale = {scale_ptr};",
        f"const float *bias = {bias_ptr or 'NULL'};",
        _parallel(instr),
        f"for (long r = 0; r < {rows}; r++) {{",
        f"    const float *xr = x + r * {size};",
        f"    float *yr = y + r * {size};",
        *_lane_sum("sum", "xr[j]", size),
        f"    float mean = sum / {size}.0f;",
        *_lane_sum("var", "(xr[j] - mean) * (xr[j] - mean)", size),
        f"    float rstd = 1.0f / sqrtf(var / {size}.0f + {eps});",
        f"    for (long j = 0; j < {size}; j++) yr[j] = (xr[j] - mean) * rstd * scale[j]"
        + (" + bias[j];" if bias_ptr else ";"),
        "}",
    ] if line)


# The primitive normalizations (ops/normalization.py): InstanceNormalization,
# GroupNormalization, MeanVarianceNormalization, LpNormalization, RMSNormalization, LRN and
# Hardmax, in float32 and float64. Like the NumPy references, statistics accumulate in double
# and each result is rounded once to the element type.

_FLOATS = (DType.FLOAT32, DType.FLOAT64)


def float_rows_accepts(view: OpView) -> str | None:
    """Every operand and result float32 or float64 (mixed widths are fine: all arithmetic
    runs in double)."""
    for t in view.results + tuple(t for t in view.operands if t is not None):
        if t.dtype not in _FLOATS:
            return f"the {view.op} kernel runs float32 and float64, not {t.dtype}"
    return None


def _row_threads(options: KernelOptions, rows: int, work: int) -> int:
    """Rows split across threads when there are at least two and enough work."""
    return min(threads_for(options.num_threads, work), max(rows, 1))


def _double(value: float) -> str:
    return c_literal(value, DType.FLOAT64)  # NaN and inf too: attributes are the model's


def _empty(out: Buffer) -> str | None:
    return "/* empty result */" if out.type.size == 0 else None


def _lines(*lines: str) -> str:
    return "\n".join(line for line in lines if line)


def _index_offset(index: str, dims: Sequence[int], strides: Sequence[int]) -> str:
    """The element offset of row-major position `index` over `dims`, each axis walked with
    its stride (0 for a broadcast axis)."""
    terms = []
    for axis, (dim, stride) in enumerate(zip(dims, strides, strict=True)):
        if stride == 0:
            continue
        below = math.prod(dims[axis + 1:])
        position = f"({index} / {below})" if below > 1 else index
        if axis > 0:
            position = f"({position} % {dim})"
        terms.append(position if stride == 1 else f"{position} * {stride}")
    return " + ".join(terms) or "0"


# InstanceNormalization, GroupNormalization ------------------------------------------------


def _channel_groups(instr: Instr) -> int:
    x = instr.operand(1)
    return x.type.shape[1] if instr.name == "InstanceNormalization" else instr.attrs.num_groups


def _channel_norm_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    x = instr.operand(1)
    rows = x.type.shape[0] * _channel_groups(instr)
    return KernelPlan({"threads": _row_threads(options, rows, x.type.size * 4)})


def _emit_channel_norm(em: Emitter, instr: Instr) -> str:
    """Rows of (channels / groups) * spatial elements: mean and variance in double, then
    (x - mean) / sqrt(var + epsilon) * scale[c] + bias[c] with scale and bias per channel."""
    out, x, scale, bias = instr.required()
    empty = _empty(out)
    if empty:
        return empty
    n, channels = x.type.shape[:2]
    groups = _channel_groups(instr)
    spatial = math.prod(x.type.shape[2:])
    per_group = channels // groups
    size = per_group * spatial
    t = c_type(out.type.dtype)
    return _lines(
        f"const {t} *x = {em.pointer(x, const=True)};",
        f"{t} *y = {em.pointer(out)};",
        f"const {c_type(scale.type.dtype)} *scale = {em.pointer(scale, const=True)};",
        f"const {c_type(bias.type.dtype)} *bias = {em.pointer(bias, const=True)};",
        _parallel(instr),
        f"for (long r = 0; r < {n * groups}; r++) {{",
        f"    const {t} *xr = x + r * {size};",
        f"    {t} *yr = y + r * {size};",
        "    double sum = 0.0, var = 0.0;",
        f"    for (long j = 0; j < {size}; j++) sum += (double)xr[j];",
        f"    const double mean = sum / {size}.0;",
        f"    for (long j = 0; j < {size}; j++) {{ double d = (double)xr[j] - mean; var += d * d; }}",
        f"    const double std = sqrt(var / {size}.0 + {_double(instr.attrs.epsilon)});",
        f"    for (long k = 0; k < {per_group}; k++) {{",
        f"        const long c = (r % {groups}) * {per_group} + k;",
        "        const double s = (double)scale[c], b = (double)bias[c];",
        f"        for (long j = k * {spatial}; j < (k + 1) * {spatial}; j++)",
        f"            yr[j] = ({t})(((double)xr[j] - mean) / std * s + b);",
        "    }",
        "}",
    )


C_KERNELS.kernel("instance_norm_rows", "InstanceNormalization", accepts=float_rows_accepts,
                 plan=_channel_norm_plan)(_emit_channel_norm)
C_KERNELS.kernel("group_norm_rows", "GroupNormalization", accepts=float_rows_accepts,
                 plan=_channel_norm_plan)(_emit_channel_norm)


# MeanVarianceNormalization ----------------------------------------------------------------


def _mvn_split(x: TensorType, axes: Sequence[int]) -> tuple[list[int], list[int], list[int], list[int]]:
    """Kept and reduced axes, each collapsed: (kept dims, kept strides, reduced dims, reduced strides)."""
    strides = contiguous_strides(x.shape)
    reduced = set(normalize_axes(axes, x.rank))
    kept_axes = [a for a in range(x.rank) if a not in reduced]
    red_axes = [a for a in range(x.rank) if a in reduced]
    kept_dims, (kept_strides,) = collapse([x.shape[a] for a in kept_axes], [[strides[a] for a in kept_axes]])
    red_dims, (red_strides,) = collapse([x.shape[a] for a in red_axes], [[strides[a] for a in red_axes]])
    return kept_dims, kept_strides, red_dims or [1], red_strides or [0]


def _mvn_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    x = instr.operand(1)
    kept_dims = _mvn_split(x.type, instr.attrs.axes)[0]
    return KernelPlan({"threads": _row_threads(options, math.prod(kept_dims), x.type.size * 4)})


@C_KERNELS.kernel("mvn_rows", "MeanVarianceNormalization", accepts=float_rows_accepts, plan=_mvn_plan)
def emit_mvn(em: Emitter, instr: Instr) -> str:
    """Per kept position, mean and mean of squares over the reduced axes (in double), then
    (x - mean) / (sqrt(max(E[x^2] - mean^2, 0)) + 1e-9)."""
    out, x = instr.required()
    empty = _empty(out)
    if empty:
        return empty
    t = c_type(out.type.dtype)
    kept_dims, kept_strides, red_dims, red_strides = _mvn_split(x.type, instr.attrs.axes)
    count = math.prod(red_dims)
    accumulate = loop_nest(red_dims, [red_strides], ["x"],
                           lambda o: f"{{ double v = (double)xr[{o[0]}]; sum += v; squares += v * v; }}", var="j")
    write = loop_nest(red_dims, [red_strides], ["x"],
                      lambda o: f"yr[{o[0]}] = ({t})(((double)xr[{o[0]}] - mean) / std);", var="j")
    return _lines(
        f"const {t} *x = {em.pointer(x, const=True)};",
        f"{t} *y = {em.pointer(out)};",
        _parallel(instr),
        f"for (long r = 0; r < {math.prod(kept_dims)}; r++) {{",
        f"    const long base = {_index_offset('r', kept_dims, kept_strides)};",
        f"    const {t} *xr = x + base;",
        f"    {t} *yr = y + base;",
        "    double sum = 0.0, squares = 0.0;",
        accumulate,
        f"    const double mean = sum / {count}.0, spread = squares / {count}.0 - mean * mean;",
        # Clamped at 0 so that a NaN spread (inf - inf) stays NaN, as in the reference.
        f"    const double std = sqrt(spread < 0.0 ? 0.0 : spread) + {_double(MVN_EPSILON)};",
        write,
        "}",
    )


# LpNormalization, Hardmax: rows along one axis --------------------------------------------


def _axis_rows(instr: Instr) -> tuple[int, int, int]:
    x = instr.operand(1)
    return _rows(x.type.shape, normalize_axis(instr.attrs.axis, x.type.rank))


def _axis_rows_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    outer, n, inner = _axis_rows(instr)
    return KernelPlan({"threads": _row_threads(options, outer * inner, outer * n * inner * 4)})


def _axis_rows_loop(em: Emitter, instr: Instr, body: Sequence[str]) -> str:
    """A loop over the rows along the instruction's axis; `body` sees xr and yr, the row's
    first elements, n_ (its length) and st (its stride)."""
    out, x = instr.required()
    outer, n, inner = _axis_rows(instr)
    t = c_type(out.type.dtype)
    return _lines(
        f"const {t} *x = {em.pointer(x, const=True)};",
        f"{t} *y = {em.pointer(out)};",
        f"const long n_ = {n}, st = {inner};",
        _parallel(instr),
        f"for (long row = 0; row < {outer * inner}; row++) {{",
        f"    const {t} *xr = x + (row / {inner}) * {n * inner} + row % {inner};",
        f"    {t} *yr = y + (row / {inner}) * {n * inner} + row % {inner};",
        *("    " + line for line in body),
        "}",
    )


@C_KERNELS.kernel("lp_norm_rows", "LpNormalization", accepts=float_rows_accepts, plan=_axis_rows_plan)
def emit_lp_norm(em: Emitter, instr: Instr) -> str:
    """x / (sum |x|^p)^(1/p) for p = 1 or 2, the norm in double; a zero row stays zero."""
    out = instr.operand(0)
    empty = _empty(out)
    if empty:
        return empty
    t = c_type(out.type.dtype)
    term = "fabs(v)" if instr.attrs.p == 1 else "v * v"
    norm = "sum" if instr.attrs.p == 1 else "sqrt(sum)"
    return _axis_rows_loop(em, instr, [
        "double sum = 0.0;",
        f"for (long j = 0; j < n_; j++) {{ double v = (double)xr[j * st]; sum += {term}; }}",
        f"const double norm = {norm};",
        f"for (long j = 0; j < n_; j++) yr[j * st] = norm == 0.0 ? ({t})0 : ({t})((double)xr[j * st] / norm);",
    ])


@C_KERNELS.kernel("hardmax_rows", "Hardmax", accepts=float_rows_accepts, plan=_axis_rows_plan)
def emit_hardmax(em: Emitter, instr: Instr) -> str:
    """1 at the first maximum of each row, 0 elsewhere; a NaN counts as the maximum (the
    first NaN wins), as in np.argmax."""
    out = instr.operand(0)
    empty = _empty(out)
    if empty:
        return empty
    t = c_type(out.type.dtype)
    return _axis_rows_loop(em, instr, [
        "long best = 0;",
        "for (long j = 1; j < n_ && xr[best * st] == xr[best * st]; j++) {",
        "    const double v = (double)xr[j * st];",
        "    if (v != v || v > (double)xr[best * st]) best = j;",
        "}",
        f"for (long j = 0; j < n_; j++) yr[j * st] = ({t})(j == best);",
    ])


# RMSNormalization ---------------------------------------------------------------------------


def _rms_layout(instr: Instr) -> tuple[int, int, list[int], list[int], list[int], list[list[int]]]:
    """(rows, row size, outer dims and scale strides (collapsed), tail dims and [x, scale]
    strides (collapsed)) with the scale broadcast to the input's shape."""
    x, scale = instr.operand(1), instr.operand(2)
    shape = x.type.shape
    axis = normalize_axis(instr.attrs.axis, x.type.rank)
    scale_strides = broadcast_strides(scale.type.shape, shape)
    outer_dims, (outer_strides,) = collapse(shape[:axis], [scale_strides[:axis]])
    tail = shape[axis:]
    tail_dims, tail_strides = collapse(tail, [contiguous_strides(tail), scale_strides[axis:]])
    if not tail_dims:
        tail_dims, tail_strides = [1], [[0], [0]]
    return math.prod(shape[:axis]), math.prod(tail), outer_dims, outer_strides, tail_dims, tail_strides


def _rms_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    rows, size = _rms_layout(instr)[:2]
    return KernelPlan({"threads": _row_threads(options, rows, rows * size * 4)})


@C_KERNELS.kernel("rms_norm_rows", "RMSNormalization", accepts=float_rows_accepts, plan=_rms_plan)
def emit_rms_norm(em: Emitter, instr: Instr) -> str:
    """x / sqrt(mean(x^2) + epsilon) * scale over axes [axis, rank), in double; the scale
    broadcasts to the input (its offsets follow from its strides, 0 along broadcast axes)."""
    out, x, scale = instr.required()
    empty = _empty(out)
    if empty:
        return empty
    t = c_type(out.type.dtype)
    rows, size, outer_dims, outer_strides, tail_dims, tail_strides = _rms_layout(instr)
    write = loop_nest(tail_dims, tail_strides, ["x", "scale"],
                      lambda o: f"yr[{o[0]}] = ({t})((double)xr[{o[0]}] / rms * (double)sr[{o[1]}]);", var="j")
    return _lines(
        f"const {t} *x = {em.pointer(x, const=True)};",
        f"{t} *y = {em.pointer(out)};",
        f"const {c_type(scale.type.dtype)} *scale = {em.pointer(scale, const=True)};",
        _parallel(instr),
        f"for (long r = 0; r < {rows}; r++) {{",
        f"    const {t} *xr = x + r * {size};",
        f"    {t} *yr = y + r * {size};",
        f"    const {c_type(scale.type.dtype)} *sr = scale + {_index_offset('r', outer_dims, outer_strides)};",
        "    double squares = 0.0;",
        f"    for (long j = 0; j < {size}; j++) {{ double v = (double)xr[j]; squares += v * v; }}",
        f"    const double rms = sqrt(squares / {size}.0 + {_double(instr.attrs.epsilon)});",
        write,
        "}",
    )


# LRN ----------------------------------------------------------------------------------------


def _lrn_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    x = instr.operand(1)
    rows = x.type.shape[0] * x.type.shape[1]
    return KernelPlan({"threads": _row_threads(options, rows, x.type.size * (instr.attrs.size + 4))})


@C_KERNELS.kernel("lrn_rows", "LRN", accepts=float_rows_accepts, plan=_lrn_plan)
def emit_lrn(em: Emitter, instr: Instr) -> str:
    """x / (bias + alpha / size * sum of squares over channels [c - (size-1)//2, c + size//2])^beta,
    one row per (batch, channel), the window clipped at the edges and summed in double."""
    out, x = instr.required()
    empty = _empty(out)
    if empty:
        return empty
    a = instr.attrs
    n, channels = x.type.shape[:2]
    spatial = math.prod(x.type.shape[2:])
    before, after = (a.size - 1) // 2, a.size // 2
    t = c_type(out.type.dtype)
    return _lines(
        f"const {t} *x = {em.pointer(x, const=True)};",
        f"{t} *y = {em.pointer(out)};",
        _parallel(instr),
        f"for (long r = 0; r < {n * channels}; r++) {{",
        f"    const long c = r % {channels};",
        f"    const long lo = c - {before} < 0 ? 0 : c - {before};",
        f"    const long hi = c + {after} >= {channels} ? {channels - 1} : c + {after};",
        f"    const {t} *xb = x + (r - c) * {spatial};",
        f"    {t} *yr = y + r * {spatial};",
        f"    for (long j = 0; j < {spatial}; j++) {{",
        "        double sum = 0.0;",
        f"        for (long k = lo; k <= hi; k++) {{ double v = (double)xb[k * {spatial} + j]; sum += v * v; }}",
        f"        const double d = pow({_double(a.bias)} + {_double(a.alpha / a.size)} * sum, {_double(a.beta)});",
        f"        yr[j] = ({t})((double)xb[c * {spatial} + j] / d);",
        "    }",
        "}",
    )
