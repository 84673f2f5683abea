"""C code from a schedule: a GEMM mapped onto a broadcast FMA (`C[j] += A[] * B[j]`: AVX-512
vfmadd231ps with a broadcast, NEON fmla by element), emitted with the instruction's and the
register file's C templates from the target description.

The structure is the one the schedule describes: an MR x NR register tile of accumulators (MR
rows of the output's M dimension, NR = NR/width vectors of its N dimension, the schedule's
register tile), each reduction step broadcasting one A element per row and loading NR/width B
vectors; B is packed at compile time into zero-padded panels of NR columns (the mapping's
compile-time pack); A is packed per call, block by block; the K loop is blocked so that a
KC x NR panel of B and the MR x KC slice of A stay within the second cache level's usable
share, rows in blocks of MC so that the MC x KC block of A takes half of it (see _blocking).
Tails: the last rows run a shorter tile, the last panel's columns go through a local tile.

Only this form is emitted; anything else is refused with the reason. Imports isa.* and
support/."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ember.isa.describe import MemoryLevel
from ember.isa.expr import Affine
from ember.isa.schedule import Schedule
from ember.support.errors import UnsupportedError
from ember.types import DType


@dataclass(frozen=True)
class GemmCode:
    """C source of `void {name}(const float *A, const float *Bp, float *C, float *workspace)`:
    C (M x N, row-major) = A (M x K, row-major) times B packed by pack_b; the workspace holds
    `{name}_workspace_floats()` = workspace_floats floats (A's blocks, packed per call)."""

    name: str
    source: str
    m: int
    n: int
    k: int
    mr: int
    nr: int
    kc: int
    mc: int
    b_transposed: bool
    flags: str

    @property
    def workspace_floats(self) -> int:
        return self.mc * self.kc

    @property
    def panels(self) -> int:
        return math.ceil(self.n / self.nr)

    def pack_b(self, b: np.ndarray) -> np.ndarray:
        """B (K x N, or N x K when the kernel reads it transposed) as [panels][K][NR] floats,
        zero past N: done once, at compile time, for a constant B."""
        matrix = np.asarray(b, dtype=np.float32)
        if self.b_transposed:
            matrix = matrix.T
        if matrix.shape != (self.k, self.n):
            raise UnsupportedError(f"pack_b: B must be {self.k} x {self.n}, got {list(matrix.shape)}")
        padded = np.zeros((self.k, self.panels * self.nr), np.float32)
        padded[:, :self.n] = matrix
        return np.ascontiguousarray(padded.reshape(self.k, self.panels, self.nr).transpose(1, 0, 2))


def _refuse(schedule: Schedule, reason: str) -> UnsupportedError:
    return UnsupportedError(f"no C emitter for {schedule.mapping.instruction.name} on {schedule.target.name} "
                            f"for {schedule.mapping.kernel.expr}: {reason}")


def _plain(index: Affine) -> str:
    dim = index.plain
    return dim if dim is not None else ""


def emit_gemm(schedule: Schedule, name: str = "mapped_gemm") -> GemmCode:
    mapping, target = schedule.mapping, schedule.target
    instruction, expr = mapping.instruction, mapping.kernel.expr
    semantics = instruction.semantics
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise _refuse(schedule, f"the function name {name!r} is not a C identifier")
    if semantics.a.indices or len(semantics.b.indices) != 1 or len(semantics.domain) != 1:
        raise _refuse(schedule, "only a broadcast FMA, C[j] += A[] * B[j], is emitted")
    lane = semantics.domain[0]
    if not lane.fixed or lane.extent is None:
        raise _refuse(schedule, "the instruction's width must be fixed (length-agnostic code is not emitted yet)")
    width = lane.extent
    if any(a.dtype is not DType.FLOAT32 for a in expr.operands) or mapping.fixups:
        raise _refuse(schedule, "only f32 kernels are emitted")
    registers = target.register_file(instruction.home(semantics.b.tensor))
    if registers is None or not registers.c or not instruction.emit or not target.c_header:
        raise _refuse(schedule, "the description has no C templates for this instruction and register file")
    out, a, b = expr.access(mapping.role("C")), expr.access(mapping.role("A")), expr.access(mapping.role("B"))
    out_dims, a_dims, b_dims = [_plain(i) for i in out.indices], [_plain(i) for i in a.indices], \
        [_plain(i) for i in b.indices]
    (axis,) = mapping.axes
    if len(out_dims) != 2 or len(axis.fused) != 1 or out_dims[1] != axis.fused[0]:
        raise _refuse(schedule, "the output must be C[m, n] with n in the lanes")
    m_dim, n_dim = out_dims
    reduction = [d for d in expr.reduction_dims]
    if len(reduction) != 1 or a_dims != [m_dim, reduction[0]] or sorted(b_dims) != sorted([reduction[0], n_dim]):
        raise _refuse(schedule, "A must be row-major [m, k] and B [k, n] or [n, k]")
    k_dim = reduction[0]
    extents = expr.extents
    m, n, k = extents[m_dim], extents[n_dim], extents[k_dim]
    tile = dict(schedule.levels[0].tile)
    mr = max(1, min(tile.get(m_dim, 1), m))
    nr = max(width, tile.get(f"{axis.dim}'", width) // width * width)
    caches = [level for level in target.memory if not level.scratchpad and level.size is not None]
    kc, mc = _blocking(caches, m, k, mr, nr)
    c = dict(registers.c)
    source = _source(name, target.c_header, c, instruction.emit, semantics, m, n, k, mr, nr, width, kc, mc,
                     str(mapping).splitlines()[0], target.name)
    return GemmCode(name, source, m, n, k, mr, nr, kc, mc, b_dims[0] == n_dim, target.c_flags)


def _blocking(caches: list[MemoryLevel], m: int, k: int, mr: int, nr: int) -> tuple[int, int]:
    """KC so that a KC x NR panel of B and an MR x KC slice of A fit the second cache level's
    usable share (so the tile runs the whole K of most GEMMs: measured on this machine, each
    extra K block costs a round trip of the accumulators that outweighs L1 residency), and MC
    (a multiple of MR) so that an MC x KC block of A fills half of that share."""
    level = caches[1] if len(caches) > 1 else (caches[0] if caches else None)
    if level is None:
        return k, m
    kc = min(k, max(8, int(level.usable_bytes // ((nr + mr) * 4)) // 8 * 8))
    mc = int(level.usable_bytes / 2 // (kc * 4)) // mr * mr
    return kc, max(mr, min(mc, math.ceil(m / mr) * mr))


def _source(name, header, c, emit, semantics, m, n, k, mr, nr, width, kc, mc, mapping_line, target) -> str:
    vectors = nr // width
    vtype = c["type"]
    lines = [f"/* Generated by ember.isa.emit_c for {target}: {mapping_line}",
             f" * C[{m} x {n}] = A[{m} x {k}] * B; register tile {mr} x {nr} ({vectors} vectors of {width}), "
             f"KC {kc}, MC {mc}. */",
             f"#include <{header}>", "#include <string.h>", ""]

    def fma(acc: str, scalar: str, vector: str) -> str:
        return (emit.replace(f"{{{semantics.output.tensor}}}", acc).replace(f"{{{semantics.a.tensor}}}", scalar)
                .replace(f"{{{semantics.b.tensor}}}", vector))

    rows_variants = sorted({mr} | ({m % mr} if m % mr else set()), reverse=True)
    for rows in rows_variants:
        lines.append(f"static void {name}_tile{rows}(long kc, const float *a, const float *bp, float *c, long ldc, "
                     f"int first) {{")
        accumulators = [f"c{r}_{v}" for r in range(rows) for v in range(vectors)]
        lines.append(f"    {vtype} {', '.join(accumulators)};")
        lines.append("    if (first) {")
        lines += [f"        c{r}_{v} = {c['zero']};" for r in range(rows) for v in range(vectors)]
        lines.append("    } else {")
        lines += [f"        c{r}_{v} = {c['load'].replace('{p}', f'c + {r} * ldc + {v * width}')};"
                  for r in range(rows) for v in range(vectors)]
        lines.append("    }")
        lines.append("    for (long k = 0; k < kc; k++) {")
        lines += [f"        {vtype} b{v} = {c['load'].replace('{p}', f'bp + k * {nr} + {v * width}')};"
                  for v in range(vectors)]
        for r in range(rows):
            lines.append(f"        {{ const float a{r} = a[k * {rows} + {r}];")
            lines += [f"          {fma(f'c{r}_{v}', f'a{r}', f'b{v}')}" for v in range(vectors)]
            lines.append("        }")
        lines.append("    }")
        lines += [f"    {c['store'].replace('{p}', f'c + {r} * ldc + {v * width}').replace('{v}', f'c{r}_{v}')};"
                  for r in range(rows) for v in range(vectors)]
        lines.append("}")
        lines.append("")
    tail = m % mr
    panels = math.ceil(n / nr)
    lines += [
        "/* A's MC x KC block, packed as row panels [MR rows][KC][MR] so that each reduction step",
        " * broadcasts from one contiguous line; workspace holds MC * KC floats. */",
        f"static void {name}_pack_a(float *panel, const float *A, long ic, long ic_end, long pc, long kc) {{",
        f"    for (long ir = ic; ir < ic_end; ir += {mr}) {{",
        f"        int rows = ic_end - ir < {mr} ? (int)(ic_end - ir) : {mr};",
        "        for (long kk = 0; kk < kc; kk++)",
        f"            for (int r = 0; r < rows; r++) panel[kk * rows + r] = A[(ir + r) * {k}L + pc + kk];",
        "        panel += rows * kc;",
        "    }",
        "}",
        "",
        f"long {name}_workspace_floats(void) {{ return {mc}L * {kc}L; }}",
        "",
        f"void {name}(const float *A, const float *Bp, float *C, float *workspace) {{",
        f"    for (long pc = 0; pc < {k}; pc += {kc}) {{",
        f"        long kc = {k} - pc < {kc} ? {k} - pc : {kc};",
        "        int first = pc == 0;",
        f"        for (long ic = 0; ic < {m}; ic += {mc}) {{",
        f"            long ic_end = ic + {mc} < {m} ? ic + {mc} : {m};",
        f"            {name}_pack_a(workspace, A, ic, ic_end, pc, kc);",
        f"            for (long jp = 0; jp < {panels}; jp++) {{",
        f"                const float *bp = Bp + (jp * {k}L + pc) * {nr};",
        f"                long col = jp * {nr}, ncols = {n} - col < {nr} ? {n} - col : {nr};",
        f"                for (long ir = ic; ir < ic_end; ir += {mr}) {{",
        "                    const float *a = workspace + (ir - ic) * kc;",
        f"                    int rows = ic_end - ir < {mr} ? (int)(ic_end - ir) : {mr};",
        f"                    if (ncols == {nr}) {{",
        f"                        if (rows == {mr}) {name}_tile{mr}(kc, a, bp, C + ir * {n}L + col, {n}, first);",
    ]
    if tail:
        lines.append(f"                        else {name}_tile{tail}(kc, a, bp, C + ir * {n}L + col, {n}, first);")
    lines += [
        "                    } else {",
        f"                        float local[{mr} * {nr}];",
        "                        for (int r = 0; r < rows; r++)",
        f"                            memcpy(local + r * {nr}, C + (ir + r) * {n}L + col, ncols * sizeof(float));",
        f"                        if (rows == {mr}) {name}_tile{mr}(kc, a, bp, local, {nr}, first);",
    ]
    if tail:
        lines.append(f"                        else {name}_tile{tail}(kc, a, bp, local, {nr}, first);")
    lines += [
        "                        for (int r = 0; r < rows; r++)",
        f"                            memcpy(C + (ir + r) * {n}L + col, local + r * {nr}, ncols * sizeof(float));",
        "                    }",
        "                }",
        "            }",
        "        }",
        "    }",
        "}",
        "",
    ]
    return "\n".join(lines)
