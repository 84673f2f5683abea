"""MatMul and FullyConnected through the packed-panel GEMM core (runtime/ember_gemm.h).

B is consumed in 32-column panels: constant weights are packed at compile time into the
panel layout; activations are packed per panel, per thread, into scratch. A is read in place
(row-major, broadcast one element at a time). Work items are (batch, panel) pairs split
across OpenMP threads; each walks all row blocks of its panel, so a packed panel is reused
from L1/L2 by every row block."""
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
# Below this many multiply-adds a parallel region costs more than it saves.
PARALLEL_MIN_MACS = 1 << 17


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

    def c_init(self, name: str = "ep") -> str:
        return (f"ember_epilogue {name} = {{ {self.bias}, {int(self.bias_per_row)}, {self.residual}, "
                f"{self.ld_residual}, {ACTIVATION_CODES[self.activation]}, {float(self.alpha).hex()}f, "
                f"{float(self.beta).hex()}f }};")


def emit_gemm(em, *, batches: int, m: int, n: int, k: int, a: str, a_batch: list[str], b_packed: str | None,
              b: str | None, b_batch: list[str], c: str, c_batch: list[str], epilogue: Epilogue,
              parallel: bool = True) -> str:
    """C = A @ B (+ epilogue) for `batches` independent products. a/b/c are base pointer
    expressions; *_batch[i] are element-offset expressions in the batch index `bi`
    (used inside the loop). Either b_packed (panels for one [K, N] matrix, shared by all
    batches) or b (row-major, packed at run time) is given."""
    panels = math.ceil(n / NR)
    items = batches * panels
    lines = [epilogue.c_init()]
    use_threads = parallel and em.num_threads > 1 and items > 1 and batches * m * n * k >= PARALLEL_MIN_MACS
    if b_packed is None:
        em.need_scratch(k * NR * 4)
    if use_threads:
        lines.append(f"#pragma omp parallel for {em.threads_pragma} schedule(static)")
    lines.append(f"for (long item = 0; item < {items}; item++) {{")
    body = [f"long bi = item / {panels}, p = item % {panels};", "(void)bi;"]
    body.append(f"const float *a_ = {a} + {a_batch[0] if a_batch else '0'};")
    body.append(f"float *c_ = {c} + {c_batch[0] if c_batch else '0'} + p * {NR};")
    if b_packed is not None:
        body.append(f"const float *bp = {b_packed} + p * {k * NR};")
    else:
        body.append(f"float *bp = (float *)(S + (long)omp_get_thread_num() * {em.scratch_stride_expr()});")
        body.append(f"ember_pack_panel(bp, {b} + {b_batch[0] if b_batch else '0'}, {n}, {k}, {n}, p * {NR});")
    body.append(f"int ncols = {n} - p * {NR} < {NR} ? (int)({n} - p * {NR}) : {NR};")
    body.append(f"for (long r = 0; r < {m}; r += {MR}) {{")
    body.append(f"    int mr = {m} - r < {MR} ? (int)({m} - r) : {MR};")
    body.append(f"    ember_tile_rows(mr, {k}, a_ + r * {k}, {k}, 1, bp, c_ + r * {n}, {n}, ncols, &ep, r, p * {NR});")
    body.append("}")
    lines += ["    " + line for line in body]
    lines.append("}")
    return "\n".join(lines)


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
        m = math.prod(a_shape[:-1])
        return _single(em, out, a, b, m, n, k, Epilogue())
    batch_shape = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    batches = math.prod(batch_shape)
    return emit_gemm(
        em, batches=batches, m=m, n=n, k=k,
        a=em.pointer(a, const=True), a_batch=[_batch_offsets(a_shape, batch_shape, m * k)],
        b_packed=None, b=em.pointer(b, const=True), b_batch=[_batch_offsets(b_shape, batch_shape, k * n)],
        c=em.pointer(out), c_batch=[f"bi * {m * n}"], epilogue=Epilogue())


def _single(em, out, a, b, m, n, k, epilogue: Epilogue) -> str:
    if _is_const_weight(b):
        packed = em.packed_weight(b, "panels32", pack_panels(b.data.reshape(k, n).astype(np.float32)))
        return emit_gemm(em, batches=1, m=m, n=n, k=k, a=em.pointer(a, const=True), a_batch=[],
                         b_packed=packed, b=None, b_batch=[], c=em.pointer(out), c_batch=[], epilogue=epilogue)
    return emit_gemm(em, batches=1, m=m, n=n, k=k, a=em.pointer(a, const=True), a_batch=[], b_packed=None,
                     b=em.pointer(b, const=True), b_batch=[], c=em.pointer(out), c_batch=[], epilogue=epilogue)


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
