"""FullyConnected on a kernel the ISA Mapper generates (ember.isa: mapped onto the
target description's broadcast FMA, scheduled by its cost model, emitted as C intrinsics).

Where it is chosen (`applies`), from measurements of the FullyConnected step alone (its
per-step timer, bench/mapped_models.py --gemms; 1 thread, 2-core AMD EPYC, family 25 model 17: Zen 4, AVX-512):
float32, a constant 2-D weight, the GEMM on one thread (the backend's num_threads is 1, or
the GEMM is below GEMM_PARALLEL_MIN_MACS so the hand-written kernel runs it on one thread
too: the mapped kernels are single-threaded), 2 to 4 rows (where the hand-written 8-row tile
idles most of its registers), at least 32 columns, and a weight matrix that is not
DRAM-bound. Elsewhere the hand-written kernel stays: at one row it is as fast (it splits K),
and from 5 rows on they are within a few percent (see the constants below).

B is packed at compile time into the mapped kernel's panels (a packed weight in the LIR,
`<weight>.mapped_panels<NR>`); the generated functions are file-scope C (Emitter.define),
one per shape, named after it. The epilogue (bias, residual, activation, in ember_gemm's
order) runs after the call, row by row, through ember_finish_span: every FullyConnected
activation is supported. The mapped kernel is only selected where the backend says the host
runs the target (KernelOptions.mapped_target: the host's own ISA, not a bundle or an -march
level), so the C stays the same for the same model, options and host."""
from __future__ import annotations

import math
from functools import lru_cache

from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.gemm import Epilogue
from ember.codegen.kernels.layouts import GEMM_PARALLEL_MIN_MACS, threads_for
from ember.codegen.kernels.registry import Kernel, KernelOptions, KernelPlan, OpView, is_whole_weight
from ember.codegen.kernels.table import C_KERNELS
from ember.isa.describe import Target, load_target
from ember.isa.emit_c import GemmCode, emit_gemm
from ember.isa.expr import parse_expr
from ember.isa.kernels import Kernel as IsaKernel
from ember.isa.report import choose
from ember.lir.ir import Buffer, Instr
from ember.support.errors import EmberError, UnsupportedError
from ember.types import DType

# hand-written / mapped, the FullyConnected step's own time (bench/mapped_models.py --gemms,
# median of 7 interleaved rounds of 200 runs, 1 thread, AMD EPYC Zen 4):
#   2x512x512 1.21, 2x256x256 1.49, 3x1024x512 1.37, 4x512x512 1.25, 4x1536x512 1.40,
#   4x3072x1024 1.43, 4x40x48 1.34, 4x32x512 1.47;
#   one row: 1x512x512 0.99, 1x1024x512 0.96, 1x1536x512 1.08, 1x3072x1024 1.01, 1x512x784 0.97,
#   1x16x512 0.67 (a single accumulator chain); 2x10x512 0.98, 4x16x512 1.05 (narrow N);
#   5x1024x512 1.02, 6x1024x512 1.02, 8x512x512 0.98, 12x512x512 1.15, 16x512x512 1.01,
#   25x1536x512 1.01.
# (A bare ctypes call of the mapped kernel against a whole run() of the hand-written one, as
# bench/isa_gemm.py times them, charges run()'s Python overhead to one side: it showed 1.2-1.9x
# at one row, which the steps' own times do not.)
MAPPED_MIN_ROWS = 2
MAPPED_MAX_ROWS = 4
MAPPED_MIN_COLUMNS = 32
# Above this the weights stream from DRAM and both kernels wait on it (1x7680x2560, 78 MB:
# 0.95 in bench/isa_gemm.py); 4x3072x1024 (12.6 MB) still gained 1.43.
MAPPED_MAX_WEIGHT_BYTES = 16 << 20


def _float32(view: OpView) -> str | None:
    if view.results[0].dtype is not DType.FLOAT32:
        return "the mapped GEMM kernels run float32"
    return None


@lru_cache(maxsize=8)
def _target(name: str) -> Target:
    """A target description, parsed once."""
    return load_target(name)


@lru_cache(maxsize=256)
def mapped_gemm(target: str, m: int, n: int, k: int) -> GemmCode | None:
    """The mapper's kernel for C[m x n] = A[m x k] * B[k x n] (B constant) on `target`, or None
    when it has no legal mapping or no C emitter for it."""
    description = _target(target)
    kernel = IsaKernel("gemm", parse_expr(f"C[i, j]:f32 += A[i, k]:f32 * B[k, j]:f32 over i:{m}, j:{n}, k:{k}"),
                       constants=frozenset({"B"}))
    schedule = choose(kernel, description)
    if schedule is None:
        return None
    try:
        code = emit_gemm(schedule, name=f"ember_mapped_f32_{m}x{n}x{k}")
    except UnsupportedError:
        return None
    return None if code.b_in_place else code


def _dims(instr: Instr) -> tuple[Buffer, Buffer, Buffer, int, int, int] | None:
    """out, A, B and (M, N, K) of a GEMM with a whole constant 2-D B; None for any other."""
    out, a, b = instr.operand(0), instr.operand(1), instr.operand(2)
    if not is_whole_weight(b) or b.type.rank != 2 or a.type.rank < 1:
        return None
    k, n = b.type.shape
    if a.type.shape[-1] != k:
        return None
    return out, a, b, math.prod(a.type.shape[:-1]), n, k


def _applies(instr: Instr, options: KernelOptions) -> bool:
    dims = _dims(instr)
    if options.mapped_target is None or options.precision != "fp32" or dims is None:
        return False
    _, _, _, m, n, k = dims
    if threads_for(options.num_threads, m * n * k, GEMM_PARALLEL_MIN_MACS) != 1:
        return False
    if not MAPPED_MIN_ROWS <= m <= MAPPED_MAX_ROWS or n < MAPPED_MIN_COLUMNS or k < 1 \
            or k * n * 4 > MAPPED_MAX_WEIGHT_BYTES:
        return False
    return mapped_gemm(options.mapped_target, m, n, k) is not None


def _code(instr: Instr) -> GemmCode:
    m, n, k = param(instr, "m"), param(instr, "n"), param(instr, "k")
    code = mapped_gemm(param(instr, "target"), m, n, k)
    if code is None:
        raise EmberError(f"node '{instr.source}' ({instr.name}): no mapped kernel for {m}x{n}x{k} "
                         "(selection and emission disagree: an Ember bug)")
    return code


def _plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    dims = _dims(instr)
    assert dims is not None and options.mapped_target is not None  # _applies held
    _, _, b, m, n, k = dims
    code = mapped_gemm(options.mapped_target, m, n, k)
    assert code is not None
    params = {"target": options.mapped_target, "m": m, "n": n, "k": k, "tile": f"{code.mr}x{code.nr}",
              "threads": 1}
    return KernelPlan(params, packed=[(b, f"mapped_panels{code.nr}", code.pack_b(b.constant().reshape(k, n)))],
                      scratch_bytes=code.workspace_elements * 4 if code.packs_a else 0)


def _define(em: Emitter, code: GemmCode, target: str) -> None:
    """The target's header and prelude once, then the kernel's functions once per shape."""
    description = _target(target)
    em.define(f"isa-prelude:{target}", "\n".join([f"#include <{description.c_header}>",
                                                 description.c_prelude.strip("\n")]))
    em.define(code.name, code.definitions)


def _emit(em: Emitter, instr: Instr, epilogue: Epilogue, has_epilogue: bool) -> str:
    code = _code(instr)
    _define(em, code, param(instr, "target"))
    out, a = instr.operand(0), instr.operand(1)
    workspace = em.scratch(instr) if code.packs_a else "NULL"
    lines = [f"{code.name}({em.pointer(a, const=True)}, {em.packed(instr)}, {em.pointer(out)}, {workspace});"]
    if has_epilogue:
        # ember_gemm's order: bias, then residual, then the activation.
        lines += [epilogue.c_init(), f"float *y = {em.pointer(out)};", f"for (long i = 0; i < {code.m}; i++) {{"]
        if epilogue.bias != "NULL":
            lines.append(f"    for (long j = 0; j < {code.n}; j++) y[i * {code.n} + j] += ep.bias[j];")
        residual = f"ep.residual + i * {code.n}" if epilogue.residual != "NULL" else "NULL"
        lines += [f"    ember_finish_span(y + i * {code.n}, {residual}, {code.n}, &ep);", "}"]
    return "\n".join(lines)


def emit_fully_connected_mapped(em: Emitter, instr: Instr) -> str:
    bias, residual = (instr.base_operands[3:] + [None] * 2)[:2]
    attrs = instr.attrs
    epilogue = Epilogue(bias=em.pointer(bias, const=True) if bias is not None else "NULL",
                        residual=em.pointer(residual, const=True) if residual is not None else "NULL",
                        ld_residual=param(instr, "n"), activation=attrs.activation, alpha=attrs.alpha, beta=attrs.beta)
    needed = bias is not None or residual is not None or attrs.activation != "none"
    return _emit(em, instr, epilogue, needed)


# Tried before the hand-written float32 GEMM; applies only where measured faster. (A MatMul
# with a constant 2-D weight is a FullyConnected by the time kernels are selected.)
C_KERNELS.add(Kernel("fully_connected_mapped", ("FullyConnected",), emit_fully_connected_mapped, accepts=_float32,
                     applies=_applies, plan=_plan), first=True)
