"""MatMul and FullyConnected through the packed-panel GEMM core (runtime/ember_gemm.c).

B is consumed in 32-column panels: constant weights are packed at compile time into the
panel layout; activations are packed at run time by the core, per chunk of panels, into
scratch. A is read in place (row-major, one broadcast element at a time). The emitted code
is a call with constant shapes; blocking and threading live in the core."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ember.codegen.c_types import c_type
from ember.codegen.kernels.registry import broadcast_strides, kernel
from ember.lir.ir import BufferKind, Instr
from ember.types import DType

NR = 32
MR = 8
ACTIVATION_CODES = {"none": 0, "relu": 1, "clip": 2, "leaky_relu": 3, "sigmoid": 4, "tanh": 5, "hard_sigmoid": 6}
# Below this many multiply-adds a parallel region costs more than it saves (a warm OpenMP
# region costs about a microsecond; 256K multiply-adds take a few).
PARALLEL_MIN_MACS = 1 << 18


def pack_panels(b: np.ndarray) -> np.ndarray:
    """[K, N] -> [ceil(N/32), K, 32] zero-padded, as float32."""
    k, n = b.shape
    panels = math.ceil(n / NR)
    padded = np.zeros((k, panels * NR), np.float32)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, panels, NR).transpose(1, 0, 2))


@dataclass
class Epilogue:
    bias: str = "NULL"
    bias_per_row: bool = False
    residual: str = "NULL"
    ld_residual: int = 0
    activation: str = "none"
    alpha: float = 0.0
    beta: float = 0.0
    transposed: bool = False  # C (and the residual) stored column-major: see ember_gemm.h

    def c_init(self, name: str = "ep") -> str:
        tail = ", 0, 0, 1" if self.transposed else ""
        return (f"ember_epilogue {name} = {{ {self.bias}, {int(self.bias_per_row)}, {self.residual}, "
                f"{self.ld_residual}, {ACTIVATION_CODES[self.activation]}, {float(self.alpha).hex()}f, "
                f"{float(self.beta).hex()}f{tail} }};")


def gemm_scratch_bytes(n: int, k: int, threads: int) -> int:
    """Mirror of ember_gemm_scratch_bytes in runtime/ember_gemm.c (chunks of 384 KiB)."""
    panels = math.ceil(n / NR)
    chunk = min(max(1, (384 * 1024) // (k * NR * 4)), panels)
    return max(chunk * k * NR * 4 * threads, panels * k * NR * 4)


def threads_for(em, macs: int) -> int:
    return em.num_threads if macs >= PARALLEL_MIN_MACS else 1


def emit_gemm_call(em, *, m: int, n: int, k: int, a: str, a_layout: tuple[int, int, int], c: str,
                   b_packed: str | None = None, packer: str | None = None, pack_ctx: str | None = None,
                   b_direct: str | None = None, koff: str | None = None, epilogue: str = "&ep",
                   threads: int = 1) -> str:
    """One call of the runtime GEMM; a_layout = (row stride, k stride, 8-row block stride).
    B is exactly one of: b_packed (compile-time panels), b_direct (row-major [K, N] read in
    place), or packer + pack_ctx (panels built at run time)."""
    if b_direct is not None:
        em.need_scratch(k * NR * 4)
    elif b_packed is None:
        em.need_scratch(gemm_scratch_bytes(n, k, threads))
    a_rs, a_ks, a_block = a_layout
    return (f"ember_gemm({m}, {n}, {k}, {a}, {a_rs}, {a_ks}, {a_block}, {b_packed or 'NULL'}, "
            f"{packer or 'NULL'}, {pack_ctx or 'NULL'}, {b_direct or 'NULL'}, {n}, {koff or 'NULL'}, {c}, {n}, "
            f"{epilogue}, "
            f"(float *)S, {threads});")


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


def _is_const_weight(buffer) -> bool:
    return buffer.kind is BufferKind.WEIGHT and not buffer.is_view


@kernel("MatMul")
def emit_matmul(em, instr: Instr) -> str:
    out, a, b = instr.operands
    if out.type.dtype is not DType.FLOAT32:
        return emit_matmul_generic(em, instr)
    a_shape = (1,) + a.type.shape if a.type.rank == 1 else a.type.shape
    b_shape = b.type.shape + (1,) if b.type.rank == 1 else b.type.shape
    m, k = a_shape[-2:]
    n = b_shape[-1]
    if len(b_shape) == 2:
        # A 2-D right operand is shared by every batch: fold A's batch into the rows.
        return _single(em, out, a, b, math.prod(a_shape[:-1]), n, k, Epilogue())
    batch_shape = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    batches = math.prod(batch_shape)
    threads = threads_for(em, m * n * k)
    call = emit_gemm_call(em, m=m, n=n, k=k, a="pa", a_layout=(k, 1, MR * k), b_direct="pb", c="pc",
                          threads=threads)
    return "\n".join([
        Epilogue().c_init(),
        f"const float *xa = {em.pointer(a, const=True)};",
        f"const float *xb = {em.pointer(b, const=True)};",
        f"float *y = {em.pointer(out)};",
        f"for (long bi = 0; bi < {batches}; bi++) {{",
        f"    const float *pa = xa + {_batch_offsets(a_shape, batch_shape, m * k)};",
        f"    const float *pb = xb + {_batch_offsets(b_shape, batch_shape, k * n)};",
        f"    float *pc = y + bi * {m * n};",
        f"    {call}",
        "}",
    ])


def _single(em, out, a, b, m, n, k, epilogue: Epilogue) -> str:
    threads = threads_for(em, m * n * k)
    a_ptr = em.pointer(a, const=True)
    if _is_const_weight(b):
        packed = em.packed_weight(b, "panels32", pack_panels(b.data.reshape(k, n).astype(np.float32)))
        call = emit_gemm_call(em, m=m, n=n, k=k, a=a_ptr, a_layout=(k, 1, MR * k), b_packed=packed,
                              c=em.pointer(out), threads=threads)
        return "\n".join([epilogue.c_init(), call])
    call = emit_gemm_call(em, m=m, n=n, k=k, a=a_ptr, a_layout=(k, 1, MR * k), b_direct=em.pointer(b, const=True),
                          c=em.pointer(out), threads=threads)
    return "\n".join([epilogue.c_init(), call])


@kernel("FullyConnected")
def emit_fully_connected(em, instr: Instr) -> str:
    out, x, w, bias, residual = (instr.operands + [None] * 5)[:5]
    k, n = w.type.shape
    m = math.prod(x.type.shape[:-1])
    attrs = instr.attrs
    epilogue = Epilogue(
        bias=em.pointer(bias, const=True) if bias is not None else "NULL",
        residual=em.pointer(residual, const=True) if residual is not None else "NULL",
        ld_residual=n, activation=attrs.activation, alpha=attrs.alpha, beta=attrs.beta)
    return _single(em, out, x, w, m, n, k, epilogue)


def emit_matmul_generic(em, instr: Instr) -> str:
    """Any element type: a plain triple loop per batch (integer and double matmuls are rare)."""
    out, a, b = instr.operands
    a_shape = (1,) + a.type.shape if a.type.rank == 1 else a.type.shape
    b_shape = b.type.shape + (1,) if b.type.rank == 1 else b.type.shape
    m, k = a_shape[-2:]
    n = b_shape[-1]
    batch_shape = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    batches = math.prod(batch_shape)
    t = c_type(out.type.dtype)
    acc = "double" if out.type.dtype.is_float else t
    return "\n".join([
        f"{t} *restrict y = {em.pointer(out)};",
        f"const {t} *xa = {em.pointer(a, const=True)};",
        f"const {t} *xb = {em.pointer(b, const=True)};",
        f"for (long bi = 0; bi < {batches}; bi++) {{",
        f"    const {t} *pa = xa + {_batch_offsets(a_shape, batch_shape, m * k)};",
        f"    const {t} *pb = xb + {_batch_offsets(b_shape, batch_shape, k * n)};",
        f"    for (long i = 0; i < {m}; i++) for (long j = 0; j < {n}; j++) {{",
        f"        {acc} s = 0;",
        f"        for (long q = 0; q < {k}; q++) s += ({acc})pa[i * {k} + q] * pb[q * {n} + j];",
        f"        y[bi * {m * n} + i * {n} + j] = ({t})s;",
        "    }",
        "}",
    ])
