"""The cpu kernel of FusedAttention (ops/fused_attention.py): one task per (batch, head),
split across the threads. A task reads its head of q, k and v in place in the projections'
[B, S, heads * d] layout (strided GEMM operands: no transposed copies), transposes the head of
k into its scratch (d x T, the GEMM's B), computes the scores S x T there with the library's
GEMM, scales, masks and soft-maxes each row while it is in cache, and multiplies by v's head
straight into its columns of y. The [B, heads, S, T] scores never exist in memory."""
from __future__ import annotations

from ember.codegen.c_types import c_literal
from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.layouts import gemm_scratch_bytes, threads_for
from ember.codegen.kernels.registry import KernelOptions, KernelPlan, OpView, broadcast_strides
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.types import DType

FUNCTION = "ember_attention_heads"

_ATTENTION_C = r"""
/* y[b][i][h*DV + e] = sum_j softmax_j(scale * q[b][i][h*D:] . k[b][j][h*D:] + mask) v[b][j][h*DV + e],
 * one (batch, head) per task. The mask (NULL for none) is read at b*mb + h*mh + i*mi + j*mj
 * (a 0 stride broadcasts). `scratch` holds `per_thread` floats a thread: k's head transposed
 * (D x T), the scores (S x T) and the GEMM's scratch. A row of -inf scores is NaN, as Softmax. */
static void ember_attention_heads(const float *q, const float *k, const float *v, const float *mask, long B,
                                  long H, long S, long T, long D, long DV, long mb, long mh, long mi, long mj,
                                  float scale, float *y, float *scratch, long per_thread, int nthreads)
{
    long tasks = B * H;
    #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) if(nthreads > 1 && tasks > 1)
    for (long t = 0; t < tasks; t++) {
        long b = t / H, h = t % H;
        float *kt = scratch + (nthreads > 1 ? ember_thread_num() : 0) * per_thread;
        float *s = kt + D * T, *gemm = s + S * T;
        const float *qh = q + b * S * H * D + h * D, *kh = k + b * T * H * D + h * D;
        const float *vh = v + b * T * H * DV + h * DV;
        ember_transpose_f32(kh, T, D, H * D, kt, T);
        ember_gemm(S, T, D, qh, H * D, 1, EMBER_MR * H * D, NULL, NULL, NULL, kt, T, NULL, s, T, NULL, gemm, 1);
        for (long i = 0; i < S; i++) {
            float *row = s + i * T;
            const float *m = mask ? mask + b * mb + h * mh + i * mi : NULL;
            /* Peaks and sums in 16 lanes over whole blocks of 16 (the tail into lane 0), so that
             * the loops vectorize; NaNs pass the peak's `>` by and come through the exps. */
            float peaks[16], sums[16];
            long whole = T / 16 * 16;
            if (m && mj == 1)
                for (long j = 0; j < T; j++) row[j] = row[j] * scale + m[j];
            else if (m)
                for (long j = 0; j < T; j++) row[j] = row[j] * scale + m[j * mj];
            else
                for (long j = 0; j < T; j++) row[j] *= scale;
            for (int l = 0; l < 16; l++) { peaks[l] = -INFINITY; sums[l] = 0.0f; }
            for (long j0 = 0; j0 < whole; j0 += 16)
                for (long j = j0; j < j0 + 16; j++) peaks[j - j0] = row[j] > peaks[j - j0] ? row[j] : peaks[j - j0];
            for (long j = whole; j < T; j++) peaks[0] = row[j] > peaks[0] ? row[j] : peaks[0];
            float peak = peaks[0];
            for (int l = 1; l < 16; l++) peak = peaks[l] > peak ? peaks[l] : peak;
            for (long j0 = 0; j0 < whole; j0 += 16)
                for (long j = j0; j < j0 + 16; j++) { row[j] = ember_expf(row[j] - peak); sums[j - j0] += row[j]; }
            for (long j = whole; j < T; j++) { row[j] = ember_expf(row[j] - peak); sums[0] += row[j]; }
            float sum = 0.0f;
            for (int l = 0; l < 16; l++) sum += sums[l];
            float inv = 1.0f / sum;
            for (long j = 0; j < T; j++) row[j] *= inv;
        }
        ember_gemm(S, DV, T, s, T, 1, EMBER_MR * T, NULL, NULL, NULL, vh, H * DV, NULL, y + b * S * H * DV + h * DV,
                   H * DV, NULL, gemm, 1);
    }
}
"""


class _Heads:
    """The geometry of one FusedAttention instruction."""

    def __init__(self, instr: Instr) -> None:
        base = instr.base_operands
        self.y, self.q, self.k, self.v = (instr.operand(i) for i in range(4))
        self.mask = base[4] if len(base) > 4 else None
        self.heads, self.scale = instr.attrs.heads, instr.attrs.scale
        self.batch, self.s, hidden = (int(d) for d in self.q.type.shape)
        self.t = int(self.k.type.shape[1])
        self.d, self.dv = hidden // self.heads, int(self.v.type.shape[2]) // self.heads

    def per_thread_floats(self) -> int:
        """k's head transposed, the scores, and the larger of the two GEMMs' scratch."""
        gemm = max(gemm_scratch_bytes(self.t, self.d, 1), gemm_scratch_bytes(self.dv, self.t, 1)) // 4
        return self.d * self.t + self.s * self.t + gemm

    def mask_strides(self) -> list[int]:
        """The mask's element strides against the scores [B, heads, S, T] (0 where it broadcasts)."""
        if self.mask is None:
            return [0, 0, 0, 0]
        return broadcast_strides(self.mask.type.shape, (self.batch, self.heads, self.s, self.t))


def _accepts(view: OpView) -> str | None:
    if view.results[0].dtype is not DType.FLOAT32:
        return "the FusedAttention kernel runs float32"
    return None


def _plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    a = _Heads(instr)
    macs = a.batch * a.heads * a.s * a.t * (a.d + a.dv)
    threads = min(threads_for(options.num_threads, macs), a.batch * a.heads)
    return KernelPlan({"threads": threads}, scratch_bytes=a.per_thread_floats() * 4 * threads)


@C_KERNELS.kernel("attention_heads", "FusedAttention", accepts=_accepts, plan=_plan)
def emit_attention(em: Emitter, instr: Instr) -> str:
    a = _Heads(instr)
    em.define(FUNCTION, _ATTENTION_C)
    threads = int(param(instr, "threads", 1))
    mask = em.pointer(a.mask, const=True) if a.mask is not None else "NULL"
    mb, mh, mi, mj = a.mask_strides()
    return (f"{FUNCTION}({em.pointer(a.q, const=True)}, {em.pointer(a.k, const=True)}, "
            f"{em.pointer(a.v, const=True)}, {mask}, {a.batch}, {a.heads}, {a.s}, {a.t}, {a.d}, {a.dv}, "
            f"{mb}, {mh}, {mi}, {mj}, {c_literal(a.scale, DType.FLOAT32)}, {em.pointer(a.y)}, {em.scratch(instr)}, "
            f"{a.per_thread_floats()}, {threads});")
