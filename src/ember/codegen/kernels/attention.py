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
typedef float ember_at_v16 __attribute__((vector_size(64)));
typedef int ember_at_i16 __attribute__((vector_size(64)));
static inline ember_at_v16 ember_at_pick(ember_at_i16 take, ember_at_v16 a, ember_at_v16 b)
{
    return (ember_at_v16)(((ember_at_i16)a & take) | ((ember_at_i16)b & ~take));
}
/* e^x on 16 lanes for x <= 0 (a score less its row's peak): ember_expf's reduction and
 * polynomial (EMBER_EXP_*, ember_math.h) with one power of two. Below -87.3 (where e^x < 2^-126,
 * nothing next to the peak's 1 in a row's sum) it is 0, and a NaN stays NaN. */
static inline ember_at_v16 ember_at_exp(ember_at_v16 x)
{
    ember_at_v16 zero = {0};
    ember_at_i16 nan = x != x, tiny = x < zero - 87.3f;
    x = ember_at_pick(nan | tiny, zero, x);
    ember_at_v16 n = EMBER_EXP_ROUND(x), r = EMBER_EXP_REDUCED(x, n), p = EMBER_EXP_POLY(r);
    ember_at_i16 bits = (__builtin_convertvector(n, ember_at_i16) + 127) << 23;
    p *= (ember_at_v16)bits;
    return ember_at_pick(nan, x + NAN, ember_at_pick(tiny, zero, p));
}
/* y[b][i][h*DV + e] = sum_j softmax_j(scale * q[b][i][h*D:] . k[b][j][h*D:] + mask) v[b][j][h*DV + e],
 * one (batch, head) per task. The mask (NULL for none) is read at b*mb + h*mh + i*mi + j*mj
 * (a 0 stride broadcasts). `scratch` holds `per_thread` floats a thread: k's head transposed
 * (D x T), the scores (S x T), the GEMM's scratch and the rows' 1 / sum (S). A row of -inf
 * scores is NaN, as Softmax. */
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
        /* Row i's 1 / sum: P.V is normalised after the product, DV values a row instead of T. */
        float *inv = kt + per_thread - S;
        for (long i = 0; i < S; i++) {
            float *row = s + i * T;
            const float *m = mask ? mask + b * mb + h * mh + i * mi : NULL;
            /* The scale, the mask and the peak in one pass over whole blocks of 16 on vectors
             * (GCC had left a plain loop of it scalar), then the exps and their sums; the tail
             * past the last whole block one value at a time. NaNs pass the peak's `>` by and
             * come through the exps. */
            long whole = T / 16 * 16;
            ember_at_v16 peaks = {0}, sums = {0}, v;
            peaks -= INFINITY;
            for (long j = 0; j < whole; j += 16) {
                memcpy(&v, row + j, sizeof v);
                v *= scale;
                if (m && mj == 1) {
                    ember_at_v16 add;
                    memcpy(&add, m + j, sizeof add);
                    v += add;
                } else if (m) {
                    for (int l = 0; l < 16; l++) v[l] += m[(j + l) * mj];
                }
                memcpy(row + j, &v, sizeof v);
                peaks = ember_at_pick(v > peaks, v, peaks);
            }
            float peak = -INFINITY;
            for (long j = whole; j < T; j++) {
                row[j] = row[j] * scale + (m ? m[j * mj] : 0.0f);
                peak = row[j] > peak ? row[j] : peak;
            }
            for (int l = 0; l < 16; l++) peak = peaks[l] > peak ? peaks[l] : peak;
            for (long j = 0; j < whole; j += 16) {
                memcpy(&v, row + j, sizeof v);
                v = ember_at_exp(v - peak);
                memcpy(row + j, &v, sizeof v);
                sums += v;
            }
            float sum = 0.0f;
            for (long j = whole; j < T; j++) { row[j] = ember_expf(row[j] - peak); sum += row[j]; }
            for (int l = 0; l < 16; l++) sum += sums[l];
            inv[i] = 1.0f / sum;
        }
        float *yh = y + b * S * H * DV + h * DV;
        ember_gemm(S, DV, T, s, T, 1, EMBER_MR * T, NULL, NULL, NULL, vh, H * DV, NULL, yh, H * DV, NULL, gemm, 1);
        for (long i = 0; i < S; i++)
            for (long e = 0; e < DV; e++) yh[i * H * DV + e] *= inv[i];
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
        """k's head transposed, the scores, the larger of the two GEMMs' scratch, and the rows'
        1 / sum."""
        gemm = max(gemm_scratch_bytes(self.t, self.d, 1), gemm_scratch_bytes(self.dv, self.t, 1)) // 4
        return self.d * self.t + self.s * self.t + gemm + self.s

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
