"""Linear algebra kernels: Det.

Det factors each matrix (copied to double scratch) as P A = L U with partial pivoting, as
LAPACK's getrf does for the reference's np.linalg.det (the row of largest magnitude, the
first on ties; a zero column is skipped, leaving a zero pivot), and returns the product of
U's diagonal with the permutation's sign, rounded once to the element type. Matrices are
split across threads in contiguous chunks, each thread with its own scratch matrix."""
from __future__ import annotations

import math

from ember.codegen.c_types import c_type
from ember.codegen.emitter import Emitter, param, threads_pragma
from ember.codegen.kernels.layouts import threads_for
from ember.codegen.kernels.registry import KernelOptions, KernelPlan
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr


def chunks(options: KernelOptions, count: int, work: int) -> int:
    """Threads (equal contiguous chunks of `count` items) for `work` multiply-adds."""
    return max(1, min(threads_for(options.num_threads, work), count))


def chunk_loop(instr: Instr, count: int, body: list[str]) -> list[str]:
    """for each item `b` of [0, count) split over param 'threads' chunks; `body` may use `c`,
    the chunk (one thread's) number, to address per-thread scratch."""
    threads = param(instr, "threads", 1)
    per = -(-count // threads)
    return [
        *([f"#pragma omp parallel for {threads_pragma(instr)} schedule(static)"] if threads > 1 else []),
        f"for (long c = 0; c < {threads}; c++)",
        f"    for (long b = c * {per}; b < {count} && b < (c + 1) * {per}; b++) {{",
        *("        " + line for line in body),
        "    }",
    ]


def _det_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    x = instr.operand(1)
    m = x.type.shape[-1]
    count = math.prod(x.type.shape[:-2])
    threads = chunks(options, count, count * m ** 3 // 3)
    return KernelPlan({"threads": threads}, scratch_bytes=threads * m * m * 8)


@C_KERNELS.kernel("det_lu", "Det", plan=_det_plan)
def emit_det(em: Emitter, instr: Instr) -> str:
    out, x = instr.required()
    m = x.type.shape[-1]
    count = out.type.size
    if count == 0:
        return "/* empty result */"
    t, tx = c_type(out.type.dtype), c_type(x.type.dtype)
    if m == 0:
        return f"{t} *y = {em.pointer(out)};\nfor (long b = 0; b < {count}; b++) y[b] = 1;  /* empty product */"
    body = [
        f"double *a = scratch + c * {m * m};",
        f"for (long e = 0; e < {m * m}; e++) a[e] = (double)x[b * {m * m} + e];",
        "double det = 1.0;",
        f"for (long k = 0; k < {m}; k++) {{",
        f"    long p = k; double best = fabs(a[k * {m} + k]);",
        f"    for (long r = k + 1; r < {m}; r++) {{",
        f"        double v = fabs(a[r * {m} + k]); if (v > best) {{ best = v; p = r; }}",
        "    }",
        f"    if (p != k) {{ det = -det; for (long j = 0; j < {m}; j++) {{ double s = a[k * {m} + j]; "
        f"a[k * {m} + j] = a[p * {m} + j]; a[p * {m} + j] = s; }} }}",
        f"    double pivot = a[k * {m} + k];",
        "    det *= pivot;",
        "    if (pivot == 0.0) continue;",
        f"    for (long r = k + 1; r < {m}; r++) {{",
        f"        double f = a[r * {m} + k] / pivot;",
        f"        for (long j = k + 1; j < {m}; j++) a[r * {m} + j] -= f * a[k * {m} + j];",
        "    }",
        "}",
        f"y[b] = ({t})(det == 0.0 ? 0.0 : det);  /* a singular matrix gives +0, as the reference's */",
    ]
    return "\n".join([
        f"{t} *y = {em.pointer(out)};",
        f"const {tx} *x = {em.pointer(x, const=True)};",
        f"double *scratch = (double *){em.scratch(instr)};",
        *chunk_loop(instr, count, body),
    ])
