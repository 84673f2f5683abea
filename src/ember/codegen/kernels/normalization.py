"""Softmax, LogSoftmax and LayerNormalization as single kernels: each row is read twice or
three times from L1 instead of once per lowered op, and exp runs through the vectorizable
ember_expf. Rows are split across threads when there is enough work."""
from __future__ import annotations

import math

import numpy as np

from ember.codegen.emitter import Emitter, param, threads_pragma
from ember.codegen.kernels.layouts import PARALLEL_MIN_MACS
from ember.codegen.kernels.registry import KernelOptions, KernelPlan, OpView, is_whole_weight
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.ops.shape_util import normalize_axis
from ember.types import DType


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


def _threads(options: KernelOptions, work: int) -> int:
    return options.num_threads if options.num_threads > 1 and work >= PARALLEL_MIN_MACS else 1


def _parallel(instr: Instr) -> str:
    if param(instr, "threads", 1) == 1:
        return ""
    return f"#pragma omp parallel for {threads_pragma(instr)} schedule(static)"


def _softmax_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    x = instr.operand(1)
    return KernelPlan({"threads": _threads(options, x.type.size * 8)})


@C_KERNELS.kernel("softmax_rows", "Softmax", "LogSoftmax", accepts=accepts, plan=_softmax_plan)
def emit_softmax(em: Emitter, instr: Instr) -> str:
    out, x = instr.required()
    axis = normalize_axis(instr.attrs.axis, x.type.rank)
    outer, n, inner = _rows(x.type.shape, axis)
    log = instr.name == "LogSoftmax"
    finish = ("for (long j = 0; j < n_; j++) yr[j * st] = yr[j * st] - lse;" if log
              else "for (long j = 0; j < n_; j++) yr[j * st] *= inv;")
    return "\n".join(line for line in [
        f"const float *x = {em.pointer(x, const=True)};",
        f"float *y = {em.pointer(out)};",
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
    return KernelPlan({"threads": _threads(options, x.type.size * 4)}, packed=packed)


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
    eps = float(np.float32(instr.attrs.epsilon)).hex()
    return "\n".join(line for line in [
        f"const float *x = {em.pointer(x, const=True)};",
        f"float *y = {em.pointer(out)};",
        f"const float *scale = {scale_ptr};",
        f"const float *bias = {bias_ptr or 'NULL'};",
        _parallel(instr),
        f"for (long r = 0; r < {rows}; r++) {{",
        f"    const float *xr = x + r * {size};",
        f"    float *yr = y + r * {size};",
        "    float sum = 0.0f;",
        f"    for (long j = 0; j < {size}; j++) sum += xr[j];",
        f"    float mean = sum / {size}.0f, var = 0.0f;",
        f"    for (long j = 0; j < {size}; j++) {{ float d = xr[j] - mean; var += d * d; }}",
        f"    float rstd = 1.0f / sqrtf(var / {size}.0f + {eps}f);",
        f"    for (long j = 0; j < {size}; j++) yr[j] = (xr[j] - mean) * rstd * scale[j]"
        + (" + bias[j];" if bias_ptr else ";"),
        "}",
    ] if line)
