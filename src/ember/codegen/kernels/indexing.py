"""Indexing and rearrangement kernels (ops/indexing.py): DepthToSpace, SpaceToDepth,
GatherElements, GatherND, ScatterElements, ScatterND, Trilu, CumSum, CumProd, OneHot,
ReverseSequence and TensorScatter, as loop nests specialized on the constant shapes.

Index operands arrive at run time: every kernel that reads one checks all of them before it
writes anything, and returns a clean error (em.fail_check) naming the node when one is out
of range. Negative indices count from the end, as in the NumPy references."""
from __future__ import annotations

import math
from collections.abc import Sequence

from ember.codegen.c_types import c_literal, c_type
from ember.codegen.emitter import Emitter
from ember.codegen.kernels.data_movement import copy_bytes, index_check, normalized_index
from ember.codegen.kernels.registry import collapse, contiguous_strides, loop_nest
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.ops.shape_util import normalize_axis
from ember.types import DType

# helpers ----------------------------------------------------------------------------------


def _index_tuples(em: Emitter, instr: Instr, sizes: Sequence[int], strides: Sequence[int], count: int,
                  row: str) -> tuple[str, str]:
    """GatherND/ScatterND: (a loop checking all `count` index tuples of len(sizes) components,
    each in range of its axis; the statements adding tuple `row`'s element offset to `off`)."""
    depth = len(sizes)
    op = instr.name
    ranges = ", ".join(f"[-{s}, {s})" for s in sizes)
    fail = em.fail_check(f"node {instr.source!r} ({op}): index out of range ({ranges} per index component)")
    checks = " ".join(f"{{ int64_t k = (int64_t)idx[j * {depth} + {d}]; {index_check('k', s, fail)} }}"
                      for d, s in enumerate(sizes))
    check = f"for (long j = 0; j < {count}; j++) {{ {checks} }}" if depth else ""
    offset = " ".join(f"{{ {normalized_index('k', f'idx[{row} * {depth} + {d}]', s)} off += k * {st}; }}"
                      for d, (s, st) in enumerate(zip(sizes, strides, strict=True)))
    return check, offset


def _permute_copy(em: Emitter, instr: Instr, shape: Sequence[int], perm: Sequence[int]) -> str:
    """y = x.reshape(shape).transpose(perm), y written contiguously."""
    out, x = instr.required()
    if out.type.size == 0:
        return "/* empty result */"
    in_strides = contiguous_strides(shape)
    out_dims = [shape[p] for p in perm]
    strides = [contiguous_strides(out_dims), [in_strides[p] for p in perm]]
    dims, strides = collapse(out_dims, strides)
    if not dims:
        dims, strides = [1], [[0], [0]]
    t = c_type(out.type.dtype)
    return "\n".join([
        f"{t} *restrict y = {em.pointer(out)};",
        f"const {t} *x = {em.pointer(x, const=True)};",
        loop_nest(dims, strides, ["y", "x"], lambda o: f"y[{o[0]}] = x[{o[1]}];"),
    ])


def _combine(reduction: str, dtype: DType, a: str, b: str) -> str:
    """np.add/multiply/maximum/minimum(a, b) in `dtype` (integers wrap; NaN propagates)."""
    t = c_type(dtype)
    if reduction == "none":
        return b
    if reduction in ("max", "min"):
        cmp = ">=" if reduction == "max" else "<="
        nan = f"{a} != {a} || " if dtype.is_float else ""
        return f"(({nan}{a} {cmp} {b}) ? {a} : {b})"
    if dtype is DType.BOOL:
        return f"({a} | {b})" if reduction == "add" else f"({a} & {b})"
    op = "+" if reduction == "add" else "*"
    if dtype.is_float:
        return f"({a} {op} {b})"
    # Unsigned 64-bit arithmetic wraps like NumPy's and never overflows a signed C int.
    return f"({t})((uint64_t){a} {op} (uint64_t){b})"


# DepthToSpace, SpaceToDepth ---------------------------------------------------------------


@C_KERNELS.kernel("depth_to_space_loops", "DepthToSpace")
def emit_depth_to_space(em: Emitter, instr: Instr) -> str:
    n, c, h, w = instr.required()[1].type.shape
    b = instr.attrs.blocksize
    if instr.attrs.mode == "DCR":
        return _permute_copy(em, instr, (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2))
    return _permute_copy(em, instr, (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3))


@C_KERNELS.kernel("space_to_depth_loops", "SpaceToDepth")
def emit_space_to_depth(em: Emitter, instr: Instr) -> str:
    n, c, h, w = instr.required()[1].type.shape
    b = instr.attrs.blocksize
    perm = (0, 3, 5, 1, 2, 4) if instr.attrs.mode == "DCR" else (0, 1, 3, 5, 2, 4)
    return _permute_copy(em, instr, (n, c, h // b, b, w // b, b), perm)


# Gathers ----------------------------------------------------------------------------------


@C_KERNELS.kernel("gather_elements_loops", "GatherElements")
def emit_gather_elements(em: Emitter, instr: Instr) -> str:
    out, data, indices = instr.required()
    rank = data.type.rank
    axis = normalize_axis(instr.attrs.axis, rank)
    size = data.type.shape[axis]
    shape = indices.type.shape
    count = indices.type.size
    if count == 0:
        return "/* empty result */"
    data_strides = contiguous_strides(data.type.shape)
    axis_stride = data_strides[axis]
    walk = [s if k != axis else 0 for k, s in enumerate(data_strides)]
    fail = em.fail_check(f"node {instr.source!r} (GatherElements): index out of range [-{size}, {size})")
    t = c_type(out.type.dtype)

    def body(o: list[str]) -> str:
        return f"{{ {normalized_index('k', f'idx[{o[0]}]', size)} y[{o[0]}] = x[{o[1]} + k * {axis_stride}]; }}"

    return "\n".join([
        f"{t} *restrict y = {em.pointer(out)};",
        f"const {t} *x = {em.pointer(data, const=True)};",
        f"const {c_type(indices.type.dtype)} *idx = {em.pointer(indices, const=True)};",
        f"for (long j = 0; j < {count}; j++) {{ int64_t k = (int64_t)idx[j]; {index_check('k', size, fail)} }}",
        loop_nest(list(shape) or [1], [contiguous_strides(shape) or [0], walk or [0]], ["y", "x"], body),
    ])


@C_KERNELS.kernel("gather_nd_rows", "GatherND")
def emit_gather_nd(em: Emitter, instr: Instr) -> str:
    out, data, indices = instr.required()
    b = instr.attrs.batch_dims
    dshape = data.type.shape
    depth = indices.type.shape[-1]
    batch = math.prod(dshape[:b])
    rows = math.prod(indices.type.shape[b:-1])
    inner = math.prod(dshape[b + depth:])
    batch_stride = math.prod(dshape[b:])
    strides = contiguous_strides(dshape[b:])[:depth]
    sizes = dshape[b:b + depth]
    if batch * rows == 0:
        return "/* no indices */"
    check, terms = _index_tuples(em, instr, sizes, strides, batch * rows, "r")
    itemsize = out.type.dtype.itemsize
    lines = [
        f"uint8_t *y = {em.address(out)};",
        f"const uint8_t *x = {em.address(data)};",
        f"const {c_type(indices.type.dtype)} *idx = {em.pointer(indices, const=True)};",
        *([check] if check else []),
    ]
    if inner == 0:
        return "\n".join(lines)
    lines += [
        f"for (long i = 0; i < {batch}; i++)",
        f"    for (long j = 0; j < {rows}; j++) {{",
        f"        long r = i * {rows} + j;",
        f"        int64_t off = i * {batch_stride};",
        f"        {terms}",
        f"        memcpy(y + r * {inner * itemsize}, x + off * {itemsize}, {inner * itemsize});",
        "    }",
    ]
    return "\n".join(lines)


# Scatters ---------------------------------------------------------------------------------


@C_KERNELS.kernel("scatter_elements_loops", "ScatterElements")
def emit_scatter_elements(em: Emitter, instr: Instr) -> str:
    out, data, indices, updates = instr.required()
    rank = data.type.rank
    axis = normalize_axis(instr.attrs.axis, rank)
    size = data.type.shape[axis]
    shape = indices.type.shape
    count = indices.type.size
    lines = [copy_bytes(em, out, data)]
    if count == 0:
        return "\n".join(lines)
    out_strides = contiguous_strides(data.type.shape)
    axis_stride = out_strides[axis]
    walk = [s if k != axis else 0 for k, s in enumerate(out_strides)]
    fail = em.fail_check(f"node {instr.source!r} (ScatterElements): index out of range [-{size}, {size})")
    dtype = out.type.dtype
    t = c_type(dtype)
    value = _combine(instr.attrs.reduction, dtype, "*d", "u[{o}]")

    def body(o: list[str]) -> str:
        return (f"{{ {normalized_index('k', f'idx[{o[0]}]', size)} {t} *d = &y[{o[1]} + k * {axis_stride}]; "
                f"*d = {value.replace('{o}', o[0])}; }}")

    lines += [
        f"{t} *y = {em.pointer(out)};",
        f"const {t} *u = {em.pointer(updates, const=True)};",
        f"const {c_type(indices.type.dtype)} *idx = {em.pointer(indices, const=True)};",
        f"for (long j = 0; j < {count}; j++) {{ int64_t k = (int64_t)idx[j]; {index_check('k', size, fail)} }}",
    ]
    # The copy goes first: a failed check leaves the output unspecified, never out of bounds.
    lines.append(loop_nest(list(shape) or [1], [contiguous_strides(shape) or [0], walk or [0]], ["u", "y"], body))
    return "\n".join(lines)


@C_KERNELS.kernel("scatter_nd_rows", "ScatterND")
def emit_scatter_nd(em: Emitter, instr: Instr) -> str:
    out, data, indices, updates = instr.required()
    dshape = data.type.shape
    depth = indices.type.shape[-1]
    rows = math.prod(indices.type.shape[:-1])
    inner = math.prod(dshape[depth:])
    strides = contiguous_strides(dshape)[:depth]
    sizes = dshape[:depth]
    lines = [copy_bytes(em, out, data)]
    if rows == 0:
        return "\n".join(lines)
    check, terms = _index_tuples(em, instr, sizes, strides, rows, "j")
    dtype = out.type.dtype
    t = c_type(dtype)
    lines += [
        f"{t} *y = {em.pointer(out)};",
        f"const {t} *u = {em.pointer(updates, const=True)};",
        f"const {c_type(indices.type.dtype)} *idx = {em.pointer(indices, const=True)};",
        *([check] if check else []),
    ]
    if inner == 0:
        return "\n".join(lines)
    value = _combine(instr.attrs.reduction, dtype, "d[e]", "s[e]")
    lines += [
        f"for (long j = 0; j < {rows}; j++) {{",
        "    int64_t off = 0;",
        f"    {terms}",
        f"    {t} *d = y + off;",
        f"    const {t} *s = u + j * {inner};",
        f"    for (long e = 0; e < {inner}; e++) d[e] = {value};",
        "}",
    ]
    return "\n".join(lines)


# Trilu, CumSum, CumProd ----------------------------------------------------------------------------


@C_KERNELS.kernel("trilu_loops", "Trilu")
def emit_trilu(em: Emitter, instr: Instr) -> str:
    out, x = instr.required()
    if out.type.size == 0:
        return "/* empty result */"
    *batch_shape, rows, cols = out.type.shape
    batch = math.prod(batch_shape)
    k = instr.attrs.k
    keep = f"j - i >= {k}" if instr.attrs.upper else f"j - i <= {k}"
    t = c_type(out.type.dtype)
    zero = c_literal(0, out.type.dtype)
    return "\n".join([
        f"{t} *restrict y = {em.pointer(out)};",
        f"const {t} *x = {em.pointer(x, const=True)};",
        f"for (long b = 0; b < {batch}; b++)",
        f"    for (long i = 0; i < {rows}; i++)",
        f"        for (long j = 0; j < {cols}; j++) {{",
        f"            long o = (b * {rows} + i) * {cols} + j;",
        f"            y[o] = ({keep}) ? x[o] : {zero};",
        "        }",
    ])


@C_KERNELS.kernel("cumulative_loops", "CumSum", "CumProd")
def emit_cumulative(em: Emitter, instr: Instr) -> str:
    """CumSum and CumProd. Floats accumulate in double (the reference sums or multiplies
    float32 in float64 and rounds each result); integers in uint64_t, wrapping like NumPy's
    int64 accumulation, stored back (truncated) in the element type."""
    out, x = instr.required()
    if out.type.size == 0:
        return "/* empty result */"
    shape = x.type.shape
    axis = normalize_axis(instr.attrs.axis, len(shape))
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    dtype = out.type.dtype
    t = c_type(dtype)
    acc = "double" if dtype.is_float else "uint64_t"
    product = instr.name == "CumProd"
    combine = f"acc {'*' if product else '+'}= ({acc})x[p];"
    pos = f"{n - 1} - s" if instr.attrs.reverse else "s"
    step = f"y[p] = ({t})acc; {combine}" if instr.attrs.exclusive else f"{combine} y[p] = ({t})acc;"
    return "\n".join([
        f"{t} *restrict y = {em.pointer(out)};",
        f"const {t} *x = {em.pointer(x, const=True)};",
        f"for (long o = 0; o < {outer}; o++)",
        f"    for (long i = 0; i < {inner}; i++) {{",
        f"        {acc} acc = {1 if product else 0};",
        f"        for (long s = 0; s < {n}; s++) {{",
        f"            long p = (o * {n} + ({pos})) * {inner} + i;",
        f"            {step}",
        "        }",
        "    }",
    ])


# OneHot, ReverseSequence ------------------------------------------------------------------


@C_KERNELS.kernel("one_hot_loops", "OneHot")
def emit_one_hot(em: Emitter, instr: Instr) -> str:
    """Out-of-range indices (after adding depth to negative ones) make an all-off row, as in
    the reference; float indices truncate toward zero."""
    out, indices, values = instr.required()
    if out.type.size == 0:
        return "/* empty result */"
    depth = instr.attrs.depth
    ishape = indices.type.shape
    axis = normalize_axis(instr.attrs.axis, len(ishape) + 1)
    outer, inner = math.prod(ishape[:axis]), math.prod(ishape[axis:])
    t = c_type(out.type.dtype)
    if indices.type.dtype.is_float:
        # Anything outside (-depth - 1, depth), NaN included, is never hot: map it to depth.
        hot = (f"double f = (double)idx[o * {inner} + i]; "
               f"int64_t h = (f > {-depth - 1}.0 && f < {depth}.0) ? (int64_t)f : {depth};")
    else:
        hot = f"int64_t h = (int64_t)idx[o * {inner} + i];"
    return "\n".join([
        f"{t} *restrict y = {em.pointer(out)};",
        f"const {c_type(indices.type.dtype)} *idx = {em.pointer(indices, const=True)};",
        f"const {t} *v = {em.pointer(values, const=True)};",
        f"const {t} off = v[0], on = v[1];",
        f"for (long o = 0; o < {outer}; o++)",
        f"    for (long i = 0; i < {inner}; i++) {{",
        f"        {hot}",
        f"        if (h < 0) h += {depth};",
        f"        for (long d = 0; d < {depth}; d++) y[(o * {depth} + d) * {inner} + i] = d == h ? on : off;",
        "    }",
    ])


@C_KERNELS.kernel("reverse_sequence_rows", "ReverseSequence")
def emit_reverse_sequence(em: Emitter, instr: Instr) -> str:
    """Lengths are clamped to [0, time steps], as in the reference."""
    out, x, lens = instr.required()
    if out.type.size == 0:
        return "/* empty result */"
    shape = x.type.shape
    batch_axis, time_axis = instr.attrs.batch_axis, instr.attrs.time_axis
    strides = contiguous_strides(shape)
    batches, steps = shape[batch_axis], shape[time_axis]
    bs, ts = strides[batch_axis], strides[time_axis]
    row = math.prod(shape[2:]) * out.type.dtype.itemsize
    return "\n".join([
        f"uint8_t *restrict y = {em.address(out)};",
        f"const uint8_t *x = {em.address(x)};",
        f"const {c_type(lens.type.dtype)} *lens = {em.pointer(lens, const=True)};",
        f"for (long b = 0; b < {batches}; b++) {{",
        "    int64_t len = (int64_t)lens[b];",
        f"    if (len < 0) len = 0; if (len > {steps}) len = {steps};",
        f"    for (long t = 0; t < {steps}; t++) {{",
        "        long src = t < len ? (long)(len - 1 - t) : t;",
        f"        memcpy(y + (b * {bs} + t * {ts}) * {out.type.dtype.itemsize}, "
        f"x + (b * {bs} + src * {ts}) * {out.type.dtype.itemsize}, {row});",
        "    }",
        "}",
    ])


# TensorScatter ----------------------------------------------------------------------------


@C_KERNELS.kernel("tensor_scatter_rows", "TensorScatter")
def emit_tensor_scatter(em: Emitter, instr: Instr) -> str:
    """present = past with update's rows written along the axis at write_indices[batch] + s
    (0 + s without indices). 'linear' fails cleanly (before writing anything) when a batch's
    rows would leave [0, length); 'circular' wraps them modulo the length, as in the
    reference (Python's modulo: never negative)."""
    out, cache, update, indices = instr.base_operands
    assert out is not None and cache is not None and update is not None
    shape = cache.type.shape
    axis = normalize_axis(instr.attrs.axis, len(shape))
    batch, mid, length = shape[0], math.prod(shape[1:axis]), shape[axis]
    rows, inner = update.type.shape[axis], math.prod(shape[axis + 1:])
    lines = [copy_bytes(em, out, cache)]
    if batch * mid * rows * inner == 0:
        return "\n".join(lines)
    itemsize = out.type.dtype.itemsize
    row = inner * itemsize
    start = "0" if indices is None else "(int64_t)idx[b]"
    lines += [
        f"uint8_t *y = {em.address(out)};",
        f"const uint8_t *u = {em.address(update)};",
    ]
    if indices is not None:
        lines.append(f"const {c_type(indices.type.dtype)} *idx = {em.pointer(indices, const=True)};")
    if instr.attrs.mode == "circular":
        # start is reduced first, so start + s never overflows.
        position = f"int64_t q = (start % {length} + s) % {length}; if (q < 0) q += {length};"
    else:
        position = "int64_t q = start + s;"
        if indices is not None:
            fail = em.fail_check(f"node {instr.source!r} (TensorScatter): write_indices place {rows} rows "
                                 f"outside a cache of length {length}")
            lines.append(f"for (long b = 0; b < {batch}; b++) "
                         f"if ((int64_t)idx[b] < 0 || (int64_t)idx[b] > {length - rows}) {{ {fail} }}")
    lines += [
        f"for (long b = 0; b < {batch}; b++) {{",
        f"    const int64_t start = {start};",
        f"    for (long m = 0; m < {mid}; m++)",
        f"        for (long s = 0; s < {rows}; s++) {{",
        f"            {position}",
        f"            memcpy(y + ((b * {mid} + m) * {length} + q) * {row}, "
        f"u + ((b * {mid} + m) * {rows} + s) * {row}, {row});",
        "        }",
        "}",
    ]
    return "\n".join(lines)
