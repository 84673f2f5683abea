"""The bf16 precision mode (`ember.compile(..., precision="bf16")`, KernelOptions.precision):
convolutions, MatMul and FullyConnected with compile-time weights run on the bf16 GEMM
(runtime/ember_gemm_bf16.c, vdpbf16ps). Weights are packed at compile time into bf16 pairs
(two consecutive k of one row or column in one 32-bit word, the operand vdpbf16ps takes);
activations stay float32 in memory and are rounded to bf16 as the GEMM packs them; sums,
bias, residual and activation are float32. Like the bf16 hint of oneDNN or OpenVINO, it
trades the operands' precision (8 significant bits) for twice the multiply-adds per
instruction.

Variants, tried before the float32 ones (registered first) and only in bf16 mode:
  conv_winograd_bf16   3x3 stride-1 convolutions where the float32 Winograd applies: F(2x2, 3x3)
                       with its 16 GEMMs in bf16 (G g G^T packed at compile time, the
                       transformed input rounded as the GEMM packs it);
  conv_bf16            Conv/FusedConv (1-D and 2-D, any group count) except depthwise:
                       weights as A (8-row blocks), the input as B: read in place for 1x1
                       stride-1 convolutions, im2col panels otherwise;
  matmul_bf16          MatMul whose right operand is a 2-D weight: the weight as B panels,
                       the activation rows as A;
  fully_connected_bf16 FullyConnected (Gemm after lowering) with a weight, as matmul_bf16
                       plus the fused epilogue.
What stays float32, and why, is `bf16_refusal`; `precision_decisions` lists the choice per
node (the driver puts it in CompiledModel.stats["precision"])."""
from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from ember.codegen.c_constants import GEMM_CHUNK_BYTES, MR, NR
from ember.codegen.c_writer import call
from ember.codegen.emitter import Emitter, param, stored_weights
from ember.codegen.kernels.conv import CONV_OPS, ConvShape, accepts_conv, grouped_gemm_loops, winograd_loops
from ember.codegen.kernels.gemm import Epilogue
from ember.codegen.kernels.layouts import WinogradLayout, threads_for
from ember.codegen.kernels.registry import Kernel, KernelOptions, KernelPlan, OpView, is_whole_weight
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr, Program
from ember.types import DType

PRECISIONS = ("fp32", "bf16")
# The instructions the precision mode is about (the others always compute in float32).
GEMM_OPS = (*CONV_OPS, "MatMul", "FullyConnected")
BF16_KERNELS = ("conv_bf16", "conv_winograd_bf16", "matmul_bf16", "fully_connected_bf16")
_SMALLEST_NORMAL = np.float32(2.0 ** -126)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16) as vcvtne2ps2bf16 rounds: to nearest even, with
    denormals flushed to signed zero."""
    x = np.asarray(x, np.float32)
    x = np.where(np.abs(x) < _SMALLEST_NORMAL, np.copysign(np.float32(0.0), x), x).astype(np.float32)
    return x.astype(ml_dtypes.bfloat16).view(np.uint16)


def _pair_words(bits: np.ndarray) -> np.ndarray:
    """[2 * kp, ...] bf16 bits -> [kp, ...] uint32 words, even k low."""
    return bits[0::2].astype(np.uint32) | (bits[1::2].astype(np.uint32) << 16)


def pack_a_blocks(a: np.ndarray) -> np.ndarray:
    """[M, K] -> the bf16 GEMM's A blocks, [ceil(M/8), ceil(K/2), 8] words (ember_gemm_bf16.c)."""
    m, k = a.shape
    blocks, kp = math.ceil(m / MR), (k + 1) // 2
    bits = np.zeros((2 * kp, blocks * MR), np.uint16)
    bits[:k, :m] = bf16_bits(a).T
    words = _pair_words(bits)  # [kp, rows]
    return np.ascontiguousarray(words.reshape(kp, blocks, MR).transpose(1, 0, 2))


def pack_b_panels(b: np.ndarray) -> np.ndarray:
    """[K, N] -> the bf16 GEMM's B panels, [ceil(N/32), ceil(K/2), 32] words."""
    k, n = b.shape
    panels, kp = math.ceil(n / NR), (k + 1) // 2
    bits = np.zeros((2 * kp, panels * NR), np.uint16)
    bits[:k, :n] = bf16_bits(b)
    words = _pair_words(bits)  # [kp, columns]
    return np.ascontiguousarray(words.reshape(kp, panels, NR).transpose(1, 0, 2))


def gemm_bf16_scratch_bytes(m: int, n: int, k: int, a_packed: bool, b_packed: bool, b_repacked: bool,
                            threads: int) -> int:
    """Mirror of ember_gemm_bf16_scratch_bytes (runtime/ember_gemm_bf16.c): A converted into
    blocks unless packed; B panels, a chunk per thread or all of them, and one float32 panel
    per thread where B comes from a float packer (im2col)."""
    kp, panels = (k + 1) // 2, math.ceil(n / NR)
    a_words = 0 if a_packed else math.ceil(m / MR) * kp * MR
    if b_packed:
        return a_words * 4
    temp = k * NR if b_repacked else 0
    chunk = min(max(1, GEMM_CHUNK_BYTES // (max(kp, 1) * NR * 4)), panels)
    per_thread = chunk * kp * NR + temp
    return (a_words + max(per_thread * threads, panels * kp * NR + temp * threads)) * 4


def bf16_refusal(instr: Instr) -> str | None:
    """Why `instr` (a convolution, MatMul or FullyConnected) computes in float32 in bf16 mode
    (None: it runs on a bf16 kernel)."""
    view = OpView.of_instr(instr)
    if view.results[0].dtype is not DType.FLOAT32:
        return f"{view.results[0].dtype} result (bf16 mode concerns float32 GEMMs)"
    if instr.name in CONV_OPS:
        if accepts_conv(view) is not None or view.operand(0).rank not in (3, 4):
            return "not a 1-D or 2-D convolution"
        s = ConvShape(instr)
        if s.depthwise:
            return "depthwise (one multiply-add per loaded weight: memory-bound, no GEMM to speed up)"
        if not is_whole_weight(s.w):
            return "weights known only at run time (bf16 packs them at compile time)"
        return None if s.k > 0 else "empty reduction"
    if instr.name == "MatMul":
        _, a, b = instr.required()
        if b.type.rank != 2 or not is_whole_weight(b):
            return "the right operand is not a 2-D weight (activation x activation stays float32)"
        return None if b.type.shape[0] > 0 else "empty reduction"
    if instr.name == "FullyConnected":
        w = instr.operand(2)
        if not is_whole_weight(w):
            return "weights known only at run time"
        return None if w.type.shape[0] > 0 else "empty reduction"
    return f"{instr.name} has no bf16 kernel"


def _applies(instr: Instr, options: KernelOptions) -> bool:
    return options.precision == "bf16" and bf16_refusal(instr) is None


def precision_decisions(program: Program) -> dict[str, str]:
    """Per convolution/MatMul/FullyConnected instruction (by its node's name): "bf16
    (kernel)" or "fp32 (kernel): why"."""
    decisions: dict[str, str] = {}
    for instr in program.compute_instrs():
        if instr.name not in GEMM_OPS or instr.kernel is None:
            continue
        name = instr.kernel.name
        key = instr.source or f"{instr.name}#{len(decisions)}"
        if name in BF16_KERNELS:
            decisions[key] = f"bf16 ({name})"
        else:
            decisions[key] = f"fp32 ({name}): {bf16_refusal(instr) or 'not chosen'}"
    return decisions


def stored_weight_bytes(program: Program) -> int:
    """Bytes of the weights the library stores (packed copies in place of the raw weights only
    they read: bf16 halves the convolution and GEMM weights)."""
    return sum(w.type.nbytes for w in stored_weights(program))


def _gemm_bf16_call(*, m: int, n: int, k: int, c: str, ldc: int, threads: int, scratch: str, ap: str = "NULL",
                    a: str = "NULL", lda: int = 0, bp: str = "NULL", pack: str = "NULL", pack_ctx: str = "NULL",
                    b: str = "NULL", ldb: int = 0, epilogue: str = "&ep") -> str:
    return call("ember_gemm_bf16", M=m, N=n, K=k, ap=ap, a=a, lda=lda, bp=bp, pack=pack, pack_ctx=pack_ctx, b=b,
                ldb=ldb, c=c, ldc=ldc, ep=epilogue, scratch=scratch, nthreads=threads) + ";"


def _packed_words(em: Emitter, instr: Instr) -> str:
    return f"((const uint32_t *){em.packed(instr)})"


# conv_bf16 --------------------------------------------------------------------------------


def _conv_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = ConvShape(instr)
    threads = s.gemm_threads(options)
    weights = s.w.constant().astype(np.float32).reshape(s.groups, s.mg, s.k)
    packed = np.concatenate([pack_a_blocks(weights[g]).reshape(-1) for g in range(s.groups)])
    b = "direct" if s.pointwise else "im2col"
    scratch = gemm_bf16_scratch_bytes(s.mg, s.pixels, s.k, True, False, b == "im2col", threads)
    return KernelPlan({"b": b, "threads": threads}, packed=[(s.w, "bf16_blocks", packed)], scratch_bytes=scratch)


def emit_conv_bf16(em: Emitter, instr: Instr) -> str:
    s = ConvShape(instr)
    direct = param(instr, "b") == "direct"
    group_words = math.ceil(s.mg / MR) * ((s.k + 1) // 2) * MR
    gemm = _gemm_bf16_call(m=s.mg, n=s.pixels, k=s.k, ap=f"{_packed_words(em, instr)} + gi * {group_words}",
                           pack="NULL" if direct else "ember_pack_im2col", pack_ctx="NULL" if direct else "&pk",
                           b="xg" if direct else "NULL", ldb=s.pixels if direct else 0, c="y + base", ldc=s.pixels,
                           threads=int(param(instr, "threads", 1)), scratch=em.scratch(instr))
    return grouped_gemm_loops(em, s, direct, gemm)


# conv_winograd_bf16 ------------------------------------------------------------------------


def _winograd_applies(instr: Instr, options: KernelOptions) -> bool:
    s = ConvShape(instr)
    return _applies(instr, options) and options.winograd and s.groups == 1 and WinogradLayout.applies(
        (s.kh, s.kw), (s.sh, s.sw), (s.dh, s.dw), s.cg, s.mg, (s.oh, s.ow))


def winograd_bf16_scratch_bytes(layout: WinogradLayout, threads: int) -> int:
    """Mirror of ember_winograd_bf16_scratch_bytes (runtime/ember_winograd.c): the float32
    Winograd's scratch and, per thread, one bf16 panel of V (C x 32 tiles)."""
    used = max(1, min(layout.blocks, threads))
    return layout.scratch_bytes(threads) + used * (layout.channels + 1) // 2 * layout.BLOCK * 4


def _winograd_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = ConvShape(instr)
    layout = WinogradLayout(s.cg, s.mg, (s.oh, s.ow))
    threads = s.gemm_threads(options)
    u = layout.transformed_weights(s.w.constant())  # [16, M, C]
    packed = np.concatenate([pack_a_blocks(u[xi]).reshape(-1) for xi in range(16)])
    return KernelPlan({"threads": threads}, packed=[(s.w, "winograd_f2x3_bf16", packed)],
                      scratch_bytes=winograd_bf16_scratch_bytes(layout, threads))


def emit_conv_winograd_bf16(em: Emitter, instr: Instr) -> str:
    return winograd_loops(em, instr, "ember_winograd_bf16", _packed_words(em, instr))


# matmul_bf16 and fully_connected_bf16 -----------------------------------------------------


def _weight_plan(instr: Instr, options: KernelOptions, x: Any, w: Any) -> KernelPlan:
    k, n = w.type.shape
    m = math.prod(x.type.shape[:-1])
    threads = threads_for(options.num_threads, m * n * k)
    packed = pack_b_panels(w.constant().reshape(k, n).astype(np.float32))
    return KernelPlan({"threads": threads}, packed=[(w, "bf16_panels", packed)],
                      scratch_bytes=gemm_bf16_scratch_bytes(m, n, k, False, True, False, threads))


def _matmul_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    _, a, b = instr.required()
    return _weight_plan(instr, options, a, b)


def _emit_rows(em: Emitter, instr: Instr, out: Any, x: Any, w: Any, epilogue: Epilogue) -> str:
    k, n = w.type.shape
    m = math.prod(x.type.shape[:-1]) if x.type.rank > 1 else 1
    gemm = _gemm_bf16_call(m=m, n=n, k=k, a=em.pointer(x, const=True), lda=k, bp=_packed_words(em, instr),
                           c=em.pointer(out), ldc=n, threads=int(param(instr, "threads", 1)), scratch=em.scratch(instr))
    return "\n".join([epilogue.c_init(), gemm])


def emit_matmul_bf16(em: Emitter, instr: Instr) -> str:
    out, a, b = instr.required()
    return _emit_rows(em, instr, out, a, b, Epilogue())


def _fully_connected_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    return _weight_plan(instr, options, instr.operand(1), instr.operand(2))


def emit_fully_connected_bf16(em: Emitter, instr: Instr) -> str:
    out, x, w = instr.operand(0), instr.operand(1), instr.operand(2)
    bias, residual = (instr.base_operands[3:] + [None] * 2)[:2]
    attrs = instr.attrs
    epilogue = Epilogue(
        bias=em.pointer(bias, const=True) if bias is not None else "NULL",
        residual=em.pointer(residual, const=True) if residual is not None else "NULL",
        ld_residual=w.type.shape[1], activation=attrs.activation, alpha=attrs.alpha, beta=attrs.beta)
    return _emit_rows(em, instr, out, x, w, epilogue)


def _float32(view: OpView) -> str | None:
    return None if view.results[0].dtype is DType.FLOAT32 else "the GEMM kernels run float32"


# Tried before the float32 variants of the same ops; each applies only in bf16 mode.
C_KERNELS.add(Kernel("conv_bf16", CONV_OPS, emit_conv_bf16, accepts=accepts_conv, applies=_applies,
                     plan=_conv_plan), first=True)
C_KERNELS.add(Kernel("conv_winograd_bf16", CONV_OPS, emit_conv_winograd_bf16, accepts=accepts_conv,
                     applies=_winograd_applies, plan=_winograd_plan), first=True)
C_KERNELS.add(Kernel("matmul_bf16", ("MatMul",), emit_matmul_bf16, accepts=_float32, applies=_applies,
                     plan=_matmul_plan), first=True)
C_KERNELS.add(Kernel("fully_connected_bf16", ("FullyConnected",), emit_fully_connected_bf16, accepts=_float32,
                     applies=_applies, plan=_fully_connected_plan), first=True)
