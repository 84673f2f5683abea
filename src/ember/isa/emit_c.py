"""C code from a schedule: a GEMM mapped onto a broadcast multiply-accumulate, `C[j] += A[] *
B[j]` (AVX-512 vfmadd231ps with a broadcast, NEON fmla by element) or its grouped-reduction form
`C[j] += A[k] * B[j, k]` (VNNI vpdpbusd and NEON sdot: k a group of 4 bytes), emitted with the
instruction's and the register file's C templates from the target description.

The structure is the one the schedule describes: an MR x NR register tile of accumulators (MR
rows of the output's M dimension, NR = NR/width vectors of its N dimension, the schedule's
register tile), each reduction step broadcasting one A element (or group) per row and loading
NR/width B vectors, each once (the register file's hold template, where it has one); B is packed
at compile time into zero-padded panels of NR columns (the mapping's compile-time pack); A is
packed per call, block by block, where many panels sweep each block and the tile's slice of it
would not stay in L1, else read in place (see _packs_a); the K loop is blocked so that a KC x NR
panel of B and the MR x KC slice of A stay within the second cache level's usable share (K
whole when one row block covers M), rows in blocks of MC so that the MC x KC block of A takes
half of it (see _blocking).
Tails: the last rows run a shorter tile, the last panel's columns go through a local tile.

A length-agnostic instruction (`C[j] += A[] * B[j] over j:<=8`, RISC-V V) whose register file
has assembly templates gets emit_vla's tiles instead: strips of the vector length the hardware
grants, so a partial last panel (of a packed or a run-time B) needs no copy.

Only these forms are emitted; anything else is refused with the reason. Imports isa.* and
support/."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ember.isa.describe import ASM_TEXT, MemoryLevel
from ember.isa.emit_vla import vla_prelude, vla_tile
from ember.isa.expr import Affine
from ember.isa.schedule import Schedule
from ember.support.errors import UnsupportedError
from ember.types import DType

_C_TYPES = {DType.FLOAT32: "float", DType.INT32: "int32_t", DType.UINT8: "uint8_t", DType.INT8: "int8_t",
            DType.BFLOAT16: "uint16_t"}  # bf16 is stored as its 16 bits


@dataclass(frozen=True)
class GemmCode:
    """C source of `void {name}(const TA *A, const TB *Bp, TC *C, TA *workspace)`: C (M x N,
    row-major) = A (M x K, row-major) times B packed by pack_b (or B itself, K x N row-major,
    when b_in_place); the workspace holds
    `{name}_workspace_floats()` = workspace_elements elements of A (its blocks, packed per
    call). group: the reduction elements one lane takes per issue (1, or 4 for VNNI/sdot)."""

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
    group: int = 1
    b_dtype: DType = DType.FLOAT32
    packs_a: bool = True
    b_in_place: bool = False  # a run-time B ([K][N] rows), read in place; its last panel copied
    a_dtype: DType = DType.FLOAT32
    workspace_dtype: DType = DType.FLOAT32  # the instruction's A type: A is packed converted
    length_agnostic: bool = False  # strips of the granted vector length: no padded copy of a last panel
    # The source without the file's includes and the target's prelude: the kernel's own
    # definitions, for a file that includes those once for several kernels.
    definitions: str = ""

    def summary(self) -> str:
        a = "packed per block" if self.packs_a else "read in place"
        b = ("read in place (run time)" if self.b_in_place else
             f"packed at compile time into {self.panels} panel{'s' if self.panels != 1 else ''}")
        return f"register tile {self.mr}x{self.nr}, KC {self.kc}, MC {self.mc}, B {b}, A {a}"

    @property
    def panels(self) -> int:
        return math.ceil(self.n / self.nr)

    @property
    def k_padded(self) -> int:
        return math.ceil(self.k / self.group) * self.group

    @property
    def workspace_elements(self) -> int:
        """A's packed block, and for a run-time B its last panel (unless read in strips)."""
        return self.mc * self.kc + (self.kc * self.nr if self.b_in_place and not self.length_agnostic else 0)

    def pack_b(self, b: np.ndarray) -> np.ndarray:
        """B (K x N, or N x K when the kernel reads it transposed) as [panels][K/group][NR]
        [group] elements, zero past N and K: done once, at compile time, for a constant B."""
        if self.b_in_place:
            raise UnsupportedError("pack_b: this kernel reads its run-time B in place; pass B itself")
        matrix = np.asarray(b, dtype=self.b_dtype.numpy)
        if self.b_transposed:
            matrix = matrix.T
        if matrix.shape != (self.k, self.n):
            raise UnsupportedError(f"pack_b: B must be {self.k} x {self.n}, got {list(matrix.shape)}")
        padded = np.zeros((self.k_padded, self.panels * self.nr), matrix.dtype)
        padded[:self.k, :self.n] = matrix
        blocks = padded.reshape(self.k_padded // self.group, self.group, self.panels, self.nr)
        return np.ascontiguousarray(blocks.transpose(2, 0, 3, 1))


def _refuse(schedule: Schedule, reason: str) -> UnsupportedError:
    return UnsupportedError(f"no C emitter for {schedule.mapping.instruction.name} on {schedule.target.name} "
                            f"for {schedule.mapping.kernel.expr}: {reason}")


def _plain(index: Affine) -> str:
    dim = index.plain
    return dim if dim is not None else ""


def emit_gemm(schedule: Schedule, name: str = "mapped_gemm", register_tile: dict[str, int] | None = None
              ) -> GemmCode:
    """C for the schedule's mapping; register_tile (loop dim -> extent, as schedule.levels[0]
    has it, e.g. from register_tiles) replaces the schedule's own, for a measured search."""
    mapping, target = schedule.mapping, schedule.target
    instruction, expr = mapping.instruction, mapping.kernel.expr
    semantics = instruction.semantics
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise _refuse(schedule, f"the function name {name!r} is not a C identifier")
    lanes = [d for d in semantics.domain if d.name not in semantics.reduction_dims]
    groups = [d for d in semantics.domain if d.name in semantics.reduction_dims]
    shape_ok = (len(lanes) == 1 and len(groups) <= 1
                and [_plain(i) for i in semantics.output.indices] == [lanes[0].name]
                and [_plain(i) for i in semantics.a.indices] == [g.name for g in groups]
                and [_plain(i) for i in semantics.b.indices] == [lanes[0].name] + [g.name for g in groups])
    if not shape_ok:
        raise _refuse(schedule, "only C[j] += A[] * B[j] or C[j] += A[k] * B[j, k] (a broadcast "
                                "multiply-accumulate) is emitted")
    lane = lanes[0]
    registers = target.register_file(instruction.home(semantics.b.tensor))
    agnostic = lane.upto and registers is not None and bool(registers.asm)
    if lane.extent is None or any(not g.fixed for g in groups) or not (lane.fixed or agnostic):
        raise _refuse(schedule, "the instruction's width must be fixed, or its register file must have asm "
                                "templates (length-agnostic code)")
    if agnostic and (groups or semantics.b.dtype.itemsize != semantics.output.dtype.itemsize):
        raise _refuse(schedule, "length-agnostic code is emitted for C[j] += A[] * B[j] with B and C lanes of one "
                                "width only")
    width, group = lane.extent, (groups[0].extent or 1) if groups else 1
    fixes = {f.operand: f for f in mapping.fixups}
    if any(not f.c for f in mapping.fixups) or semantics.output.tensor in fixes:
        raise _refuse(schedule, "element-type fix-ups without a C rewrite (or of the output) are not emitted yet")
    out, a, b = expr.access(mapping.role("C")), expr.access(mapping.role("A")), expr.access(mapping.role("B"))
    if any(x.dtype not in _C_TYPES for x in (out, a, b, semantics.a, semantics.b)):
        raise _refuse(schedule, "element types other than f32, bf16, i32, u8 and i8 are not emitted")
    kind = "asm" if agnostic else "C"
    templates = b_templates = None
    if registers is not None:
        lookup = registers.asm_templates if agnostic else registers.c_templates
        templates, b_templates = lookup(out.dtype), lookup(semantics.b.dtype)
    if templates is None or b_templates is None or not instruction.emit or not target.c_header:
        raise _refuse(schedule, f"the description has no {kind} templates for {out.dtype.value} and "
                                f"{semantics.b.dtype.value} vectors of this instruction's register file")
    if agnostic and not ASM_TEXT.fullmatch(instruction.emit):
        raise _refuse(schedule, f"its emit template {instruction.emit!r} is not one assembly instruction")
    out_dims, a_dims, b_dims = [_plain(i) for i in out.indices], [_plain(i) for i in a.indices], \
        [_plain(i) for i in b.indices]
    lane_axis = next(x for x in mapping.axes if x.dim == lane.name)
    n_dims = list(lane_axis.fused)  # several when the lanes run over fused contiguous dims (pixels)
    if not n_dims or len(out_dims) - len(n_dims) not in (0, 1) or out_dims[len(out_dims) - len(n_dims):] != n_dims:
        raise _refuse(schedule, "the output must be C[m, n] (or C[n]) with n in the lanes")
    m_dim = out_dims[0] if len(out_dims) > len(n_dims) else None
    reduction = list(expr.reduction_dims)
    rows = [m_dim] if m_dim is not None else []
    if len(reduction) != 1 or a_dims != rows + reduction or b_dims not in ([*reduction, *n_dims],
                                                                            [*n_dims, *reduction]):
        raise _refuse(schedule, "A must be row-major [m, k] and B [k, n] or [n, k]")
    if groups and next(x for x in mapping.axes if x.dim == groups[0].name).fused != (reduction[0],):
        raise _refuse(schedule, "the instruction's reduction group must run over the GEMM's k")
    run_time = [c for c in mapping.layout if not c.at_compile_time and c.kind != "fixup"]
    if run_time:
        raise _refuse(schedule, f"it needs a run-time {run_time[0].kind} of {run_time[0].tensor} (not emitted yet)")
    b_in_place = mapping.role("B") not in mapping.kernel.constants
    if b_in_place and (group != 1 or b_dims[0] != reduction[0] or a.dtype is not b.dtype or fixes):
        raise _refuse(schedule, "a run-time B is read in place only as [k, n] rows of A's element type")
    extents = expr.extents
    m, n, k = (extents[m_dim] if m_dim else 1), math.prod(extents[d] for d in n_dims), extents[reduction[0]]
    tile = dict(register_tile) if register_tile is not None else dict(schedule.levels[0].tile)
    mr = max(1, min(tile.get(m_dim, 1), m)) if m_dim else 1
    nr = max(width, tile.get(f"{lane.name}'", width) // width * width)
    caches = [level for level in target.memory if not level.scratchpad and level.size is not None]
    kc, mc = _blocking(caches, m, math.ceil(k / group) * group, mr, nr, a.dtype.itemsize, group)
    a_fix = fixes.get(semantics.a.tensor)
    convert = a_fix.c if a_fix else ""
    pack_a = _packs_a(n, nr, k, group, bool(convert), mr * kc * a.dtype.itemsize,
                      caches[0].usable_bytes if caches else math.inf)
    types = (_C_TYPES[a.dtype], _C_TYPES[semantics.a.dtype], _C_TYPES[semantics.b.dtype], _C_TYPES[out.dtype])
    try:
        source, definitions = _source(name, target.c_header, target.c_prelude, templates, b_templates, instruction.emit,
                         semantics, types, convert, m, n, math.ceil(k / group) * group, k, mr, nr, width, group, kc,
                         mc, str(mapping).splitlines()[0], target.name, b_in_place, pack_a, agnostic)
    except ValueError as err:  # emit_vla's limits (a register tile its asm cannot hold)
        raise _refuse(schedule, str(err)) from None
    return GemmCode(name, source, m, n, k, mr, nr, kc, mc, b_dims[0] != reduction[0], target.c_flags, group,
                    semantics.b.dtype, pack_a, b_in_place, a.dtype,
                    semantics.a.dtype, agnostic, definitions)


PACK_A_MIN_PANELS = 8  # panels of B that sweep each block of A before packing it pays


def _packs_a(n: int, nr: int, k: int, group: int, converts: bool, row_slice_bytes: int, first_level_bytes: float
             ) -> bool:
    """Packing A pays for itself when each block is swept by many panels of B and the tile's
    MR x KC slice of A, read in place, would not stay in the first cache level (MR rows of a
    long stride). Otherwise the tile reads A in place, which needs whole groups in every row
    and no element-type rewrite. Measured on this workspace's EPYC (bench/isa_gemm.py): 1760 x
    128 x 1760 (4 panels) f32 +16%, int8 +36% in place; 5124 x 700 x 2048 (22 panels, an 96 KiB
    f32 slice) -8% in place; a slice within L1 (f32 K 512, int8 K 2048) equal or better in place."""
    if k % group != 0 or converts:
        return True
    panels = math.ceil(n / nr)
    return panels >= PACK_A_MIN_PANELS and row_slice_bytes > first_level_bytes


def _blocking(caches: list[MemoryLevel], m: int, k: int, mr: int, nr: int, itemsize: int, group: int
              ) -> tuple[int, int]:
    """KC so that a KC x NR panel of B and an MR x KC slice of A fit the second cache level's
    usable share (so the tile runs the whole K of most GEMMs: measured on this machine, each
    extra K block costs a round trip of the accumulators that outweighs L1 residency), and MC
    (a multiple of MR) so that an MC x KC block of A fills half of that share. KC is a
    multiple of the reduction group."""
    level = caches[1] if len(caches) > 1 else (caches[0] if caches else None)
    if level is None:
        return k, m
    if m <= mr:
        # One row block (a GEMV-like M): each element of B is used once, so no block of it is
        # worth keeping in a cache, and K blocks would only add round trips of the
        # accumulators (1 x 7680 x 2560 f32: +8% with K whole, measured).
        return k, mr
    kc = min(k, max(8, int(level.usable_bytes // ((nr + mr) * itemsize)) // 8 * 8))
    kc = max(group, kc // group * group)
    mc = int(level.usable_bytes / 2 // (kc * itemsize)) // mr * mr
    return kc, max(mr, min(mc, math.ceil(m / mr) * mr))


def _source(name, header, prelude, c, bc, emit, semantics, types, convert, m, n, k, k_true, mr, nr, width, group,
            kc, mc, mapping_line, target, b_in_place, pack_a, agnostic=False) -> tuple[str, str]:
    """c, bc: the vector templates of the accumulators and of B (assembly ones when agnostic:
    the tiles are emit_vla's, each taking its column count); convert: the C rewrite of an A
    element ({x}) while packing, or ""."""
    ta_in, ta, tb, tc = types
    vectors = nr // width
    comment = [f"/* Generated by ember.isa.emit_c for {target}: {mapping_line}",
               f" * C[{m} x {n}] = A[{m} x {k_true}] * B; register tile {mr} x {nr} ({vectors} vectors of {width}"
               f"{f', reduction groups of {group}' if group > 1 else ''}), KC {kc}, MC {mc}. */"]
    lines = [*comment, f"#include <{header}>", "#include <stdint.h>", "#include <string.h>",
             *prelude.strip("\n").split("\n"), ""]
    own = len(lines)  # where the kernel's own definitions start, after the file's includes and prelude
    lines += vla_prelude(c) if agnostic else []

    def texts() -> tuple[str, str]:
        return "\n".join(lines), "\n".join([*comment, *lines[own:]])

    def fma(acc: str, scalar: str, vector: str) -> str:
        return (emit.replace(f"{{{semantics.output.tensor}}}", acc).replace(f"{{{semantics.a.tensor}}}", scalar)
                .replace(f"{{{semantics.b.tensor}}}", vector))

    rows_variants = sorted({mr} | ({m % mr} if m % mr else set()), reverse=True)
    for rows in rows_variants if agnostic else ():
        lines += vla_tile(name, rows, vectors, (ta, tb, tc), semantics.b.dtype.itemsize, c, bc, emit,
                          (semantics.output.tensor, semantics.a.tensor, semantics.b.tensor))
    for rows in rows_variants if not agnostic else ():
        vtype = c["type"]
        lines.append(f"static void {name}_tile{rows}(long kc, const {ta} *a, long a_rs, long a_ks, const {tb} *bp, "
                     f"long b_ks, {tc} *c, long ldc, int first) {{")
        lines.append(f"    {vtype} {', '.join(f'c{r}_{v}' for r in range(rows) for v in range(vectors))};")
        lines.append("    if (first) {")
        lines += [f"        c{r}_{v} = {c['zero']};" for r in range(rows) for v in range(vectors)]
        lines.append("    } else {")
        lines += [f"        c{r}_{v} = {c['load'].replace('{p}', f'c + {r} * ldc + {v * width}')};"
                  for r in range(rows) for v in range(vectors)]
        lines.append("    }")
        lines.append(f"    for (long k = 0; k < kc / {group}; k++) {{")
        lines += [f"        {bc['type']} b{v} = {bc['load'].replace('{p}', f'bp + k * b_ks + {v * width * group}')};"
                  for v in range(vectors)]
        if "hold" in bc:  # one load per B vector, not one per row (see the description's comment)
            lines += [f"        {bc['hold'].replace('{v}', f'b{v}')}" for v in range(vectors)]
        for r in range(rows):
            lines += [f"        {fma(f'c{r}_{v}', f'a[k * a_ks + {r} * a_rs]', f'b{v}')}"
                      for v in range(vectors)]
        lines.append("    }")
        lines += [f"    {c['store'].replace('{p}', f'c + {r} * ldc + {v * width}').replace('{v}', f'c{r}_{v}')};"
                  for r in range(rows) for v in range(vectors)]
        lines.append("}")
        lines.append("")
    tail = m % mr
    panels = math.ceil(n / nr)
    element = convert.replace("{x}", f"A[(ir + r) * {k_true}L + pc + kk]") if convert else \
        f"A[(ir + r) * {k_true}L + pc + kk]"
    lines += [] if not pack_a else [
        "/* A's MC x KC block, packed as row panels [MR rows][KC/group][rows][group] so that each",
        " * reduction step broadcasts from one contiguous line; zero past K. */",
        f"static void {name}_pack_a({ta} *panel, const {ta_in} *A, long ic, long ic_end, long pc, long kc) {{",
        f"    long whole = {'0' if convert else f'(pc + kc <= {k_true} ? kc : {k_true} - pc) / {group}'};"
        "  /* groups copied whole */",
        f"    for (long ir = ic; ir < ic_end; ir += {mr}) {{",
        f"        int rows = ic_end - ir < {mr} ? (int)(ic_end - ir) : {mr};",
        "        for (long q = 0; q < whole; q++)",
        "            for (int r = 0; r < rows; r++)",
        f"                memcpy(panel + (q * rows + r) * {group}, A + (ir + r) * {k_true}L + pc + q * {group},",
        f"                       sizeof({ta}) * {group});",
        f"        for (long kk = whole * {group}; kk < kc; kk++)",
        "            for (int r = 0; r < rows; r++)",
        f"                panel[(kk / {group}) * rows * {group} + r * {group} + kk % {group}] =",
        f"                    pc + kk < {k_true} ? {element} : 0;",
        "        panel += rows * kc;",
        "    }",
        "}",
        "",
    ]
    lines += [
        f"long {name}_workspace_floats(void) {{ return {mc}L * {kc}L"
        f"{f' + {kc}L * {nr}L' if b_in_place and not agnostic else ''}; }}",
        "",
        f"void {name}(const {ta_in} *A, const {tb} *Bp, {tc} *C, {ta} *workspace) {{",
        f"    for (long pc = 0; pc < {k}; pc += {kc}) {{",
        f"        long kc = {k} - pc < {kc} ? {k} - pc : {kc};",
        "        int first = pc == 0;",
        f"        for (long ic = 0; ic < {m}; ic += {mc}) {{",
        f"            long ic_end = ic + {mc} < {m} ? ic + {mc} : {m};",
        *([f"            {name}_pack_a(workspace, A, ic, ic_end, pc, kc);"] if pack_a else []),
        f"            for (long jp = 0; jp < {panels}; jp++) {{",
        f"                long col = jp * {nr}, ncols = {n} - col < {nr} ? {n} - col : {nr};",
        *([f"                const {tb} *bp = Bp + pc * {n}L + col;",
           f"                long b_ks = {n};",
           *([] if agnostic else [
           f"                if (ncols < {nr}) {{  /* the last panel, copied and zero-padded */",
           f"                    {tb} *tail = workspace + {mc}L * {kc}L;",
           "                    for (long kk = 0; kk < kc; kk++) {",
           f"                        memcpy(tail + kk * {nr}, Bp + (pc + kk) * {n}L + col, ncols * sizeof({tb}));",
           f"                        memset(tail + kk * {nr} + ncols, 0, ({nr} - ncols) * sizeof({tb}));",
           "                    }",
           f"                    bp = tail; b_ks = {nr};",
           "                }"])] if b_in_place else
          [f"                const {tb} *bp = Bp + (jp * {k}L + pc) * {nr};",
           f"                long b_ks = {nr * group};"]),
        f"                for (long ir = ic; ir < ic_end; ir += {mr}) {{",
        f"                    int rows = ic_end - ir < {mr} ? (int)(ic_end - ir) : {mr};",
        *([f"                    const {ta} *a = workspace + (ir - ic) * kc;",
           f"                    long a_rs = {group}, a_ks = (long)rows * {group};"] if pack_a else
          [f"                    const {ta} *a = A + ir * {k_true}L + pc;",
           f"                    long a_rs = {k_true}L, a_ks = {group};"]),
    ]
    if agnostic:  # every panel, partial ones too, goes straight to the tile
        call = f"(kc, a, a_rs, a_ks, bp, b_ks, C + ir * {n}L + col, {n}, first, ncols);"
        lines += [f"                    if (rows == {mr}) {name}_tile{mr}{call}",
                  *([f"                    else {name}_tile{tail}{call}"] if tail else []),
                  "                }", "            }", "        }", "    }", "}", ""]
        return texts()
    lines += [
        f"                    if (ncols == {nr}) {{",
        f"                        if (rows == {mr})",
        f"                            {name}_tile{mr}(kc, a, a_rs, a_ks, bp, b_ks, C + ir * {n}L + col, {n}, first);",
    ]
    if tail:
        lines.append(f"                        else\n                            "
                     f"{name}_tile{tail}(kc, a, a_rs, a_ks, bp, b_ks, C + ir * {n}L + col, {n}, first);")
    lines += [
        "                    } else {",
        f"                        {tc} local[{mr} * {nr}];",
        "                        for (int r = 0; r < rows; r++)",
        f"                            memcpy(local + r * {nr}, C + (ir + r) * {n}L + col, ncols * sizeof({tc}));",
        f"                        if (rows == {mr}) {name}_tile{mr}(kc, a, a_rs, a_ks, bp, b_ks, local, {nr}, first);",
    ]
    if tail:
        lines.append(f"                        else {name}_tile{tail}(kc, a, a_rs, a_ks, bp, b_ks, local, {nr}, "
                     "first);")
    lines += [
        "                        for (int r = 0; r < rows; r++)",
        f"                            memcpy(C + (ir + r) * {n}L + col, local + r * {nr}, ncols * sizeof({tc}));",
        "                    }",
        "                }",
        "            }",
        "        }",
        "    }",
        "}",
        "",
    ]
    return texts()
