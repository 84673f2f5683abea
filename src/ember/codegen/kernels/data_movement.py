"""Data movement kernels: copy/reshape (memcpy unless source and destination coincide),
Transpose, Slice, Concat, Gather, Pad and Tile as strided loop nests."""
from __future__ import annotations

import math

from ember.codegen.c_types import c_literal, c_type
from ember.codegen.emitter import Emitter
from ember.codegen.kernels.registry import collapse, contiguous_strides, loop_nest
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Buffer, Instr
from ember.ops.shape_util import normalize_axis


def copy_bytes(em: Emitter, dst: Buffer, src: Buffer) -> str:
    """dst = src, byte for byte; nothing when the two coincide."""
    dst_addr, src_addr = em.address(dst), em.address(src)
    if dst_addr == src_addr or dst.type.nbytes == 0:
        return "/* in place: source and destination coincide */"
    return f"memmove({dst_addr}, {src_addr}, {dst.type.nbytes});"


def index_check(var: str, size: int, fail: str) -> str:
    """Fails unless -size <= var < size (var an int64_t index read at run time)."""
    return f"if ({var} < -{size} || {var} >= {size}) {{ {fail} }}"


def normalized_index(var: str, expr: str, size: int) -> str:
    """`int64_t var` = the index `expr`, a negative one counted from the end of `size`."""
    return f"int64_t {var} = (int64_t)({expr}); if ({var} < 0) {var} += {size};"


@C_KERNELS.kernel("copy_bytes", "copy", "Reshape", "BitCast")
def emit_copy(em: Emitter, instr: Instr) -> str:
    out, src = instr.required()[:2]
    return copy_bytes(em, out, src)


def _typed(em: Emitter, instr: Instr) -> list[str]:
    out, x = instr.required()[:2]
    t = c_type(out.type.dtype)
    return [f"{t} *restrict y = {em.pointer(out)};", f"const {t} *x = {em.pointer(x, const=True)};"]


@C_KERNELS.kernel("transpose_loops", "Transpose")
def emit_transpose(em: Emitter, instr: Instr) -> str:
    out, x = instr.required()
    perm = instr.attrs.perm
    in_strides = contiguous_strides(x.type.shape)
    strides = [contiguous_strides(out.type.shape), [in_strides[p] for p in perm]]
    dims, strides = collapse(out.type.shape, strides)
    if not dims:
        dims, strides = [1], [[0], [0]]
    lines = _typed(em, instr)
    lines.append(loop_nest(dims, strides, ["y", "x"], lambda o: f"y[{o[0]}] = x[{o[1]}];"))
    return "\n".join(lines)


@C_KERNELS.kernel("slice_loops", "Slice")
def emit_slice(em: Emitter, instr: Instr) -> str:
    out, x = instr.required()
    attrs = instr.attrs
    in_strides = contiguous_strides(x.type.shape)
    starts = [0] * x.type.rank
    steps = [1] * x.type.rank
    for axis, start, step in zip(attrs.axes, attrs.starts, attrs.steps, strict=True):
        starts[axis], steps[axis] = start, step
    base = sum(s * st for s, st in zip(starts, in_strides, strict=True))
    strides = [contiguous_strides(out.type.shape), [st * step for st, step in zip(in_strides, steps, strict=True)]]
    if out.type.size == 0:
        return "/* empty slice */"
    dims, strides = collapse(out.type.shape, strides)
    if not dims:
        dims, strides = [1], [[0], [0]]
    lines = _typed(em, instr)
    lines.append(f"x += {base};")
    lines.append(loop_nest(dims, strides, ["y", "x"], lambda o: f"y[{o[0]}] = x[{o[1]}];"))
    return "\n".join(lines)


@C_KERNELS.kernel("concat_rows", "Concat")
def emit_concat(em: Emitter, instr: Instr) -> str:
    out, *ins = instr.required()
    axis = normalize_axis(instr.attrs.axis, out.type.rank)
    outer = math.prod(out.type.shape[:axis])
    inner = math.prod(out.type.shape[axis + 1:])
    itemsize = out.type.dtype.itemsize
    row = out.type.shape[axis] * inner * itemsize
    lines = [f"uint8_t *y = {em.address(out)};"]
    parts = []  # (source address, byte offset in an output row, bytes per row)
    offset = 0
    for buffer in ins:
        chunk = buffer.type.shape[axis] * inner * itemsize
        if chunk:
            parts.append((em.address(buffer), offset, chunk))
        offset += chunk
    if len(parts) <= CONCAT_UNROLLED_INPUTS:
        for src, offset, chunk in parts:
            lines.append(f"for (long o = 0; o < {outer}; o++) "
                         f"memmove(y + o * {row} + {offset}, {src} + o * {chunk}, {chunk});")
        return "\n".join(lines)
    # Many inputs: one loop over tables (a statement per input made gcc superlinear; a
    # 100k-input Concat crashed it).
    count = len(parts)
    lines += [f"const uint8_t *const src[{count}] = {{{', '.join(p[0] for p in parts)}}};",
              f"static const long offset[{count}] = {{{', '.join(str(p[1]) for p in parts)}}};",
              f"static const long chunk[{count}] = {{{', '.join(str(p[2]) for p in parts)}}};",
              f"for (long i = 0; i < {count}; i++)",
              f"    for (long o = 0; o < {outer}; o++) memmove(y + o * {row} + offset[i], src[i] + o * chunk[i], "
              "chunk[i]);"]
    return "\n".join(lines)


# Concats with more inputs than this copy through tables in one loop.
CONCAT_UNROLLED_INPUTS = 16


@C_KERNELS.kernel("gather_rows", "Gather")
def emit_gather(em: Emitter, instr: Instr) -> str:
    out, data, indices = instr.required()
    axis = normalize_axis(instr.attrs.axis, data.type.rank)
    outer = math.prod(data.type.shape[:axis])
    n = data.type.shape[axis]
    inner = math.prod(data.type.shape[axis + 1:])
    count = indices.type.size
    itemsize = data.type.dtype.itemsize
    fail = em.fail_check(f"node {instr.source!r} (Gather): index out of range [-{n}, {n})")
    return "\n".join([
        f"uint8_t *y = {em.address(out)};",
        f"const uint8_t *x = {em.address(data)};",
        f"const {c_type(indices.type.dtype)} *idx = {em.pointer(indices, const=True)};",
        f"for (long j = 0; j < {count}; j++) {{ int64_t k = (int64_t)idx[j]; {index_check('k', n, fail)} }}",
        f"for (long o = 0; o < {outer}; o++)",
        f"    for (long j = 0; j < {count}; j++) {{",
        f"        {normalized_index('k', 'idx[j]', n)}",
        f"        memcpy(y + (o * {count} + j) * {inner * itemsize}, x + (o * {n} + k) * {inner * itemsize}, "
        f"{inner * itemsize});",
        "    }",
    ])


def _index_map(mode: str, size: int, i: str) -> str:
    """Source index for a padded coordinate `i` (may be outside [0, size))."""
    if mode == "edge":
        return f"({i} < 0 ? 0 : ({i} >= {size} ? {size - 1} : {i}))"
    if mode == "wrap":
        return f"((({i}) % {size} + {size}) % {size})"
    # reflect: mirror without repeating the edge; period 2 * (size - 1)
    if size == 1:
        return "0"
    period = 2 * (size - 1)
    m = f"((({i}) % {period} + {period}) % {period})"
    return f"({m} < {size} ? {m} : {period} - {m})"


def _constant_pad(instr: Instr) -> list[str]:
    """Constant Pad as a fill of the whole result, then the kept input copied in, a contiguous
    run (the last axis) at a time. One loop nest choosing per element between the input and
    the value (a conditional load) was miscompiled by GCC 12.2's loop vectorizer at -O3 with
    AVX2 or AVX-512 (x [1,3,4,5,2] padded 3 and 3 on axis 3: garbage in 72 of 264 elements;
    fuzz seed 171)."""
    out, x = instr.required()
    rank = x.type.rank
    begins, ends = instr.attrs.pads[:rank], instr.attrs.pads[rank:]
    value = c_literal(instr.attrs.value, out.type.dtype)
    lines = [f"for (long e = 0; e < {out.type.size}; e++) y[e] = {value};"]
    if rank == 0:
        return ["y[0] = x[0];"]
    first = [max(0, -b) for b in begins]  # the first input index kept (negative pads crop)
    kept = [x.type.shape[a] - first[a] - max(0, -ends[a]) for a in range(rank)]
    if any(k <= 0 for k in kept):
        return lines
    in_strides, out_strides = contiguous_strides(x.type.shape), contiguous_strides(out.type.shape)
    src = sum(first[a] * in_strides[a] for a in range(rank))
    dst = sum(max(0, begins[a]) * out_strides[a] for a in range(rank))
    lines.append(loop_nest(kept[:-1], [out_strides[:-1], in_strides[:-1]], ["y", "x"],
                           lambda o: f"memcpy(y + {dst} + {o[0]}, x + {src} + {o[1]}, {kept[-1]} * sizeof(*y));"))
    return lines


@C_KERNELS.kernel("pad_loops", "Pad")
def emit_pad(em: Emitter, instr: Instr) -> str:
    out, x = instr.required()
    attrs = instr.attrs
    rank = x.type.rank
    begins = attrs.pads[:rank]
    out_shape, in_shape = out.type.shape, x.type.shape
    in_strides = contiguous_strides(in_shape)
    lines = _typed(em, instr)
    if out.type.size == 0:
        return "/* empty result */"
    if attrs.mode == "constant":
        return "\n".join(lines + _constant_pad(instr))
    idx = [f"i{a}" for a in range(rank)]
    # Negative pads crop first: edges, reflections and wraps are those of the cropped range.
    ends = attrs.pads[rank:]
    mapped = []
    for a in range(rank):
        low = max(-begins[a], 0)
        kept = in_shape[a] - low - max(-ends[a], 0)
        mapped.append(f"({low} + {_index_map(attrs.mode, kept, f'({idx[a]} - {max(begins[a], 0)})')})")
    offset = " + ".join(f"{m} * {in_strides[a]}" for a, m in enumerate(mapped)) or "0"
    body = f"y[{{o}}] = x[{offset}];"
    out_strides = contiguous_strides(out_shape)
    lines.append(loop_nest(out_shape or [1], [out_strides or [0]], ["y"],
                           lambda o: body.replace("{o}", o[0])))
    return "\n".join(lines)


@C_KERNELS.kernel("tile_loops", "Tile")
def emit_tile(em: Emitter, instr: Instr) -> str:
    out, x = instr.required()
    in_shape = x.type.shape
    in_strides = contiguous_strides(in_shape)
    rank = len(in_shape)
    if out.type.size == 0:
        return "/* empty result */"
    offset = " + ".join(f"(i{a} % {in_shape[a]}) * {in_strides[a]}" for a in range(rank)) or "0"
    lines = _typed(em, instr)
    lines.append(loop_nest(out.type.shape or [1], [contiguous_strides(out.type.shape) or [0]], ["y"],
                           lambda o: f"y[{o[0]}] = x[{offset}];"))
    return "\n".join(lines)
