"""Softmax, LogSoftmax and LayerNormalization as single kernels: each row is read twice or
three times from L1 instead of once per lowered op, and exp runs through the vectorizable
ember_expf. Rows are split across threads when there is enough work."""
from __future__ import annotations

import math

import numpy as np

from ember.codegen.kernels.gemm import PARALLEL_MIN_MACS
from ember.codegen.kernels.registry import kernel
from ember.graph import Constant, Node
from ember.lir.ir import BufferKind, Instr
from ember.ops.shape_util import normalize_axis
from ember.types import DType


def accepts(node: Node) -> bool:
    """Whether these kernels run `node` natively (else the cpu backend lowers it)."""
    x = node.inputs[0]
    if x.type.dtype is not DType.FLOAT32:
        return False
    if node.op == "LayerNormalization":
        axis = normalize_axis(node.attrs.axis, x.type.rank)
        size = math.prod(x.type.shape[axis:])
        return all(v is None or isinstance(v, Constant) or v.type.size == size for v in node.inputs[1:])
    return True


def _rows(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def _parallel(em, work: int) -> str:
    return f"#pragma omp parallel for {em.threads_pragma} schedule(static)" if (
        em.num_threads > 1 and work >= PARALLEL_MIN_MACS) else ""


@kernel("Softmax", "LogSoftmax")
def emit_softmax(em, instr: Instr) -> str:
    out, x = instr.operands
    axis = normalize_axis(instr.attrs.axis, x.type.rank)
    outer, n, inner = _rows(x.type.shape, axis)
    log = instr.name == "LogSoftmax"
    finish = ("for (long j = 0; j < n_; j++) yr[j * st] = yr[j * st] - lse;" if log
              else "for (long j = 0; j < n_; j++) yr[j * st] *= inv;")
    return "\n".join(line for line in [
        f"const float *x = {em.pointer(x, const=True)};",
        f"float *y = {em.pointer(out)};",
        f"const long n_ = {n}, st = {inner};",
        _parallel(em, outer * n * inner * 8),
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


def _broadcast_param(em, value, shape_tail: tuple[int, ...], layout: str) -> str | None:
    """A pointer to `value` laid out over the normalized axes (compile-time broadcast)."""
    if value is None:
        return None
    if value.type.size == math.prod(shape_tail):
        return em.pointer(value, const=True)
    if value.kind is not BufferKind.WEIGHT:
        raise ValueError("non-constant broadcast LayerNormalization parameter")
    full = np.broadcast_to(value.data, shape_tail).astype(np.float32)
    return em.packed_weight(value, layout, np.ascontiguousarray(full))


@kernel("LayerNormalization")
def emit_layer_norm(em, instr: Instr) -> str:
    out, x, scale, bias = (instr.operands + [None] * 4)[:4]
    axis = normalize_axis(instr.attrs.axis, x.type.rank)
    tail = x.type.shape[axis:]
    rows, size = math.prod(x.type.shape[:axis]), math.prod(tail)
    scale_ptr = _broadcast_param(em, scale, tail, f"broadcast{list(tail)}")
    bias_ptr = _broadcast_param(em, bias, tail, f"broadcast{list(tail)}")
    eps = float(np.float32(instr.attrs.epsilon)).hex()
    return "\n".join(line for line in [
        f"const float *x = {em.pointer(x, const=True)};",
        f"float *y = {em.pointer(out)};",
        f"const float *scale = {scale_ptr};",
        f"const float *bias = {bias_ptr or 'NULL'};",
        _parallel(em, rows * size * 4),
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
