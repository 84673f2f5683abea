"""MatMul and FullyConnected through the packed-panel GEMM core (runtime/ember_gemm.c).

B is consumed in 32-column panels: constant weights are packed at compile time into the
panel layout (a packed weight in the LIR); activations are read in place, a panel at a time
through scratch. A is read in place (row-major, one broadcast element at a time). The
emitted code is a call with constant shapes; blocking and threading live in the core."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ember.codegen.c_constants import c_activation
from ember.codegen.c_types import c_literal, c_type
from ember.codegen.c_writer import call, init
from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.layouts import (
    GEMM_PARALLEL_MIN_MACS,
    MR,
    NR,
    gemm_scratch_bytes,
    pack_panels,
    threads_for,
)
from ember.codegen.kernels.registry import KernelOptions, KernelPlan, OpView, broadcast_strides, is_whole_weight
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.types import DType


@dataclass
class Epilogue:
    """ember_epilogue (ember_gemm.h): bias, residual and activation applied in the tile."""

    bias: str = "NULL"
    bias_per_row: bool = False
    residual: str = "NULL"
    ld_residual: int = 0
    activation: str = "none"
    alpha: float = 0.0
    beta: float = 0.0
    transposed: bool = False  # C (and the residual) stored column-major: see ember_gemm.h

    def c_init(self, name: str = "ep") -> str:
        """A designated initializer: every field named, the activation by its enum."""
        fields: dict[str, object] = {
            "bias": self.bias, "bias_per_row": int(self.bias_per_row), "residual": self.residual,
            "ld_residual": self.ld_residual, "act": c_activation(self.activation),
            "alpha": c_literal(self.alpha, DType.FLOAT32), "beta": c_literal(self.beta, DType.FLOAT32)}
        if self.transposed:
            fields["transposed"] = 1
        return init("ember_epilogue", name, **fields)


def gemm_call(*, m: int | str, n: int | str, k: int, a: str, a_layout: tuple[int, int, int], c: str,
              ldc: int | str | None = None, b_packed: str = "NULL", packer: str = "NULL", pack_ctx: str = "NULL",
              b_direct: str = "NULL", ldb: int | str | None = None, koff: str = "NULL", epilogue: str = "&ep",
              scratch: str = "NULL", threads: int = 1) -> str:
    """One call of ember_gemm, each argument named in a comment; a_layout = (row stride,
    k stride, 8-row block stride). B is exactly one of: b_packed (compile-time panels),
    b_direct (row-major [K, N] read in place), or packer + pack_ctx (panels built at run time)."""
    a_rs, a_ks, a_block = a_layout
    return call("ember_gemm", M=m, N=n, K=k, a=a, a_rs=a_rs, a_ks=a_ks, a_block=a_block, bp=b_packed, pack=packer,
                pack_ctx=pack_ctx, b_direct=b_direct, ldb=n if ldb is None else ldb, koff=koff, c=c,
                ldc=n if ldc is None else ldc, ep=epilogue, scratch=scratch, nthreads=threads) + ";"


def gemm_b_scratch(n: int, k: int, threads: int, b: str) -> int:
    """Scratch a GEMM needs for its B operand: none for packed panels, one panel for B read
    in place, the chunked panels for B packed at run time."""
    if b == "packed":
        return 0
    if b == "direct":
        return k * NR * 4
    return gemm_scratch_bytes(n, k, threads)


def _batch_offsets(shape: tuple[int, ...], batch_shape: tuple[int, ...], matrix: int) -> str:
    """Element offset of batch `bi` in an operand whose batch dims broadcast to batch_shape."""
    strides = broadcast_strides(shape[:-2], batch_shape)
    terms = []
    divisor = 1
    for axis in range(len(batch_shape) - 1, -1, -1):
        if strides[axis]:
            terms.append(f"((bi / {divisor}) % {batch_shape[axis]}) * {strides[axis] * matrix}")
        divisor *= batch_shape[axis]
    return " + ".join(terms) or "0"


def _matmul_dims(instr: Instr) -> tuple[tuple[int, ...], tuple[int, ...], int, int, int]:
    _, a, b = instr.required()
    a_shape = (1,) + a.type.shape if a.type.rank == 1 else a.type.shape
    b_shape = b.type.shape + (1,) if b.type.rank == 1 else b.type.shape
    m, k = a_shape[-2:]
    return a_shape, b_shape, m, k, b_shape[-1]


def _float32(view: OpView) -> str | None:
    return None if view.results[0].dtype is DType.FLOAT32 else "the GEMM kernels run float32"


def _plan_matmul(instr: Instr, options: KernelOptions) -> KernelPlan:
    _, a, b = instr.required()
    a_shape, b_shape, m, k, n = _matmul_dims(instr)
    if len(b_shape) == 2:
        rows = math.prod(a_shape[:-1])
        threads = threads_for(options.num_threads, rows * n * k, GEMM_PARALLEL_MIN_MACS)
        if is_whole_weight(b):
            return KernelPlan({"b": "packed", "threads": threads},
                              packed=[(b, "panels32", pack_panels(b.constant().reshape(k, n).astype(np.float32)))])
        return KernelPlan({"b": "direct", "threads": threads}, scratch_bytes=gemm_b_scratch(n, k, threads, "direct"))
    threads = threads_for(options.num_threads, m * n * k, GEMM_PARALLEL_MIN_MACS)
    return KernelPlan({"b": "direct", "batched": True, "threads": threads},
                      scratch_bytes=gemm_b_scratch(n, k, threads, "direct"))


def _emit_single(em: Emitter, instr: Instr, out, a, b, m: int, n: int, k: int, epilogue: Epilogue) -> str:
    threads = int(param(instr, "threads", 1))
    packed = param(instr, "b") == "packed"
    call = gemm_call(m=m, n=n, k=k, a=em.pointer(a, const=True), a_layout=(k, 1, MR * k), c=em.pointer(out),
                     threads=threads, scratch=em.scratch(instr), b_packed=em.packed(instr) if packed else "NULL",
                     b_direct="NULL" if packed else em.pointer(b, const=True))
    return "\n".join([epilogue.c_init(), call])


@C_KERNELS.kernel("matmul_gemm", "MatMul", accepts=_float32, plan=_plan_matmul)
def emit_matmul(em: Emitter, instr: Instr) -> str:
    out, a, b = instr.required()
    a_shape, b_shape, m, k, n = _matmul_dims(instr)
    if not param(instr, "batched", False):
        # A 2-D right operand is shared by every batch: A's batch folds into the rows.
        return _emit_single(em, instr, out, a, b, math.prod(a_shape[:-1]), n, k, Epilogue())
    batch_shape = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    call = gemm_call(m=m, n=n, k=k, a="pa", a_layout=(k, 1, MR * k), b_direct="pb", c="pc",
                     scratch=em.scratch(instr), threads=int(param(instr, "threads", 1)))
    return "\n".join([
        Epilogue().c_init(),
        f"const float *xa = {em.pointer(a, const=True)};",
        f"const float *xb = {em.pointer(b, const=True)};",
        f"float *y = {em.pointer(out)};",
        f"for (long bi = 0; bi < {math.prod(batch_shape)}; bi++) {{",
        f"    const float *pa = xa + {_batch_offsets(a_shape, batch_shape, m * k)};",
        f"    const float *pb = xb + {_batch_offsets(b_shape, batch_shape, k * n)};",
        f"    float *pc = y + bi * {m * n};",
        f"    {call}",
        "}",
    ])


@C_KERNELS.kernel("matmul_loops", "MatMul")
def emit_matmul_loops(em: Emitter, instr: Instr) -> str:
    """Any element type: a plain triple loop per batch (integer and double matmuls are rare)."""
    out, a, b = instr.required()
    a_shape, b_shape, m, k, n = _matmul_dims(instr)
    batch_shape = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    t = c_type(out.type.dtype)
    acc = "double" if out.type.dtype.is_float else t
    return "\n".join([
        f"{t} *restrict y = {em.pointer(out)};",
        f"const {t} *xa = {em.pointer(a, const=True)};",
        f"const {t} *xb = {em.pointer(b, const=True)};",
        f"for (long bi = 0; bi < {math.prod(batch_shape)}; bi++) {{",
        f"    const {t} *pa = xa + {_batch_offsets(a_shape, batch_shape, m * k)};",
        f"    const {t} *pb = xb + {_batch_offsets(b_shape, batch_shape, k * n)};",
        f"    for (long i = 0; i < {m}; i++) for (long j = 0; j < {n}; j++) {{",
        f"        {acc} s = 0;",
        f"        for (long q = 0; q < {k}; q++) s += ({acc})pa[i * {k} + q] * pb[q * {n} + j];",
        f"        y[bi * {m * n} + i * {n} + j] = ({t})s;",
        "    }",
        "}",
    ])


def _plan_fully_connected(instr: Instr, options: KernelOptions) -> KernelPlan:
    x, w = instr.operand(1), instr.operand(2)
    k, n = w.type.shape
    m = math.prod(x.type.shape[:-1])
    threads = threads_for(options.num_threads, m * n * k, GEMM_PARALLEL_MIN_MACS)
    if is_whole_weight(w):
        return KernelPlan({"b": "packed", "threads": threads},
                          packed=[(w, "panels32", pack_panels(w.constant().reshape(k, n).astype(np.float32)))])
    return KernelPlan({"b": "direct", "threads": threads}, scratch_bytes=gemm_b_scratch(n, k, threads, "direct"))


@C_KERNELS.kernel("fully_connected_gemm", "FullyConnected", accepts=_float32, plan=_plan_fully_connected)
def emit_fully_connected(em: Emitter, instr: Instr) -> str:
    out, x, w = instr.operand(0), instr.operand(1), instr.operand(2)
    bias, residual = (instr.base_operands[3:] + [None] * 2)[:2]
    k, n = w.type.shape
    attrs = instr.attrs
    epilogue = Epilogue(
        bias=em.pointer(bias, const=True) if bias is not None else "NULL",
        residual=em.pointer(residual, const=True) if residual is not None else "NULL",
        ld_residual=n, activation=attrs.activation, alpha=attrs.alpha, beta=attrs.beta)
    return _emit_single(em, instr, out, x, w, math.prod(x.type.shape[:-1]), n, k, epilogue)
