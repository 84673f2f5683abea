"""Reductions (ReduceSum/Max/Min/Prod). When the reduced axes are innermost, each output
accumulates a contiguous run with 16 independent lanes (vectorizable without reassociation
flags); otherwise the input is walked once in memory order, accumulating into the output."""
from __future__ import annotations

import math

from ember.codegen.c_types import c_literal, c_type, lowest
from ember.codegen.emitter import Emitter
from ember.codegen.kernels.registry import collapse, contiguous_strides, loop_nest
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.ops.shape_util import normalize_axes
from ember.types import DType

LANES = 16


def _highest(dtype: DType) -> str:
    if dtype.is_float:
        return "INFINITY"
    import numpy as np

    return c_literal(int(np.iinfo(dtype.numpy).max), dtype)


def _spec(name: str, dtype: DType) -> tuple[str, str]:
    """(identity, combine expression over acc and v)."""
    if name == "ReduceSum":
        return c_literal(0, dtype), "acc + v"
    if name == "ReduceProd":
        return c_literal(1, dtype), "acc * v"
    if name == "ReduceMax":
        nan = "v != v || " if dtype.is_float else ""
        return lowest(dtype), f"(({nan}v > acc) ? v : acc)"
    nan = "v != v || " if dtype.is_float else ""
    return _highest(dtype), f"(({nan}v < acc) ? v : acc)"


# Outputs of a strided float32 sum kept in a double array on the stack (32 KiB at most).
WIDE_OUTPUTS = 4096


@C_KERNELS.kernel("reduce_loops", "ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin")
def emit_reduce(em: Emitter, instr: Instr) -> str:
    out, x = instr.required()
    dtype = x.type.dtype
    t = c_type(dtype)
    shape = x.type.shape
    axes = normalize_axes(instr.attrs.axes, len(shape))
    identity, combine = _spec(instr.name, dtype)
    lines = [f"{t} *restrict y = {em.pointer(out)};", f"const {t} *x = {em.pointer(x, const=True)};"]
    if out.type.size == 0:
        return "/* empty result */"
    reduced = math.prod(shape[a] for a in axes)
    inner_start = len(shape) - len(axes)
    if axes == tuple(range(inner_start, len(shape))):
        count = out.type.size
        acc_type = "double" if dtype is DType.FLOAT32 and instr.name in ("ReduceSum", "ReduceProd") else t
        lines += [
            f"for (long o = 0; o < {count}; o++) {{",
            f"    const {t} *row = x + o * {reduced};",
            f"    {t} lane[{LANES}];",
            f"    for (int l = 0; l < {LANES}; l++) lane[l] = {identity};",
            "    long j = 0;",
            f"    for (; j + {LANES} <= {reduced}; j += {LANES})",
            f"        for (int l = 0; l < {LANES}; l++) {{ {t} acc = lane[l], v = row[j + l]; lane[l] = {combine}; }}",
            f"    {acc_type} acc = {identity};",
            f"    for (int l = 0; l < {LANES}; l++) {{ {acc_type} v = lane[l]; acc = {combine}; }}",
            f"    for (; j < {reduced}; j++) {{ {acc_type} v = row[j]; acc = {combine}; }}",
            f"    y[o] = ({t})acc;",
            "}",
        ]
        return "\n".join(lines)
    out_strides_full = []
    kept = [a for a in range(len(shape)) if a not in axes]
    kept_strides = contiguous_strides([shape[a] for a in kept])
    for axis in range(len(shape)):
        out_strides_full.append(0 if axis in axes else kept_strides[kept.index(axis)])
    dims, strides = collapse(shape, [contiguous_strides(shape), out_strides_full])
    if not dims:
        dims, strides = [1], [[0], [0]]
    if dtype is DType.FLOAT32 and instr.name in ("ReduceSum", "ReduceProd") and out.type.size <= WIDE_OUTPUTS:
        # Sums walked in memory order add one value at a time to each output: in double, as the
        # contiguous path's final sum is (a float32 total over 10^6 values drifted 1e-3 from
        # the interpreter's pairwise sum; a BatchNormalization's statistics over N, H, W).
        lines.append(f"double wide[{out.type.size}];")
        lines.append(f"for (long o = 0; o < {out.type.size}; o++) wide[o] = {identity};")
        lines.append(loop_nest(dims, strides, ["x", "wide"],
                               lambda o: f"{{ double acc = wide[{o[1]}], v = x[{o[0]}]; wide[{o[1]}] = {combine}; }}"))
        lines.append(f"for (long o = 0; o < {out.type.size}; o++) y[o] = ({t})wide[o];")
        return "\n".join(lines)
    lines.append(f"for (long o = 0; o < {out.type.size}; o++) y[o] = {identity};")
    lines.append(loop_nest(dims, strides, ["x", "y"],
                           lambda o: f"{{ {t} acc = y[{o[1]}], v = x[{o[0]}]; y[{o[1]}] = {combine}; }}"))
    return "\n".join(lines)
