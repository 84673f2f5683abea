"""Selection and ordering kernels: TopK.

TopK keeps, per row along the axis, a binary heap of the k best positions seen so far (its
root the worst of them), so a row costs O(n log k) rather than a full sort; the heap is then
sorted in place (heapsort), best first. The order is the reference's (ops/indexing.py, stable
NumPy sorts): by value, NaN above every number (first when largest, last when smallest),
ties by the lower index. The heap lives in the indices result itself (strided like the row),
so the kernel needs no scratch. Rows are split across threads."""
from __future__ import annotations

import math

from ember.codegen.c_types import c_type
from ember.codegen.emitter import Emitter, param, threads_pragma
from ember.codegen.kernels.layouts import threads_for
from ember.codegen.kernels.registry import KernelOptions, KernelPlan
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.ops.shape_util import normalize_axis
from ember.types import DType


def _rows(instr: Instr) -> tuple[int, int, int, int]:
    """(outer, n, inner, k): rows are outer * inner, each n long with stride inner."""
    x = instr.operand(2)
    axis = normalize_axis(instr.attrs.axis, x.type.rank)
    shape = x.type.shape
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]), instr.attrs.k


def _plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    outer, n, inner, k = _rows(instr)
    rows = outer * inner
    work = rows * n * max(1, k.bit_length())
    return KernelPlan({"threads": min(threads_for(options.num_threads, work), max(rows, 1))})


def _better(dtype: DType, a: str, b: str, largest: bool) -> str:
    """C: value a strictly ahead of value b (NaN counts as above every number, and equal to
    itself)."""
    if not dtype.is_float:
        return f"({a} > {b})" if largest else f"({a} < {b})"
    if largest:
        return f"({a} != {a} ? {b} == {b} : {a} > {b})"
    return f"({b} != {b} ? {a} == {a} : {a} < {b})"


@C_KERNELS.kernel("topk_heap", "TopK", plan=_plan)
def emit_topk(em: Emitter, instr: Instr) -> str:
    values, indices, x = instr.required()
    outer, n, inner, k = _rows(instr)
    if k == 0 or outer * inner == 0:
        return "/* empty result */"
    dtype = x.type.dtype
    t = c_type(dtype)
    largest = instr.attrs.largest

    def value(pos: str) -> str:
        return f"xr[({pos}) * {inner}]" if inner != 1 else f"xr[{pos}]"

    def slot(s: str) -> str:
        return f"h[({s}) * {inner}]" if inner != 1 else f"h[{s}]"

    def worse(a: str, b: str) -> str:
        """Row positions a, b whose values are in locals va, vb: a ranks after b."""
        return (f"({_better(dtype, 'v' + b, 'v' + a, largest)} || "
                f"(!{_better(dtype, 'v' + a, 'v' + b, largest)} && {b} < {a}))")

    def sift_down(size: str) -> list[str]:
        """Restores the heap below the root (the worst on top) over slots [0, size)."""
        return [
            "for (long s = 0;;) {",
            "    long c = 2 * s + 1;",
            f"    if (c >= {size}) break;",
            f"    if (c + 1 < {size}) {{",
            f"        int64_t l = {slot('c')}, r = {slot('c + 1')}; {t} vl = {value('l')}, vr = {value('r')};",
            f"        if ({worse('r', 'l')}) c++;",
            "    }",
            f"    int64_t hc = {slot('c')}, hs = {slot('s')}; {t} vhc = {value('hc')}, vhs = {value('hs')};",
            f"    if (!{worse('hc', 'hs')}) break;",
            f"    {slot('c')} = hs; {slot('s')} = hc; s = c;",
            "}",
        ]

    threads = param(instr, "threads", 1)
    lines = [
        f"{t} *restrict y = {em.pointer(values)};",
        f"int64_t *restrict ind = {em.pointer(indices)};",
        f"const {t} *x = {em.pointer(x, const=True)};",
        f"#pragma omp parallel for {threads_pragma(instr)} schedule(static)" if threads > 1 else "",
        f"for (long row = 0; row < {outer * inner}; row++) {{",
        f"    const long o = row / {inner}, i = row % {inner};",
        f"    const {t} *xr = x + o * {n * inner} + i;",
        f"    int64_t *h = ind + o * {k * inner} + i;",
        f"    {t} *yr = y + o * {k * inner} + i;",
        # Fill: the first k positions, each sifted up.
        f"    for (long j = 0; j < {k}; j++) {{",
        f"        const {t} vj = {value('j')};",
        "        long s = j;",
        "        while (s > 0) {",
        f"            long p = (s - 1) / 2; int64_t hp = {slot('p')}; {t} vhp = {value('hp')};",
        f"            if (!{worse('j', 'hp')}) break;",
        f"            {slot('s')} = hp; s = p;",
        "        }",
        f"        {slot('s')} = j;",
        "    }",
        # Scan: a later position enters only with a strictly better value (it loses ties).
        f"    for (long j = {k}; j < {n}; j++) {{",
        f"        const {t} v = {value('j')}, vroot = {value(slot('0'))};",
        f"        if (!{_better(dtype, 'v', 'vroot', largest)}) continue;",
        f"        {slot('0')} = j;",
        *("        " + line for line in sift_down(str(k))),
        "    }",
        # Heapsort: the worst moves to the end each round, leaving the best first.
        f"    for (long end = {k - 1}; end > 0; end--) {{",
        f"        int64_t top = {slot('0')}; {slot('0')} = {slot('end')}; {slot('end')} = top;",
        *("        " + line for line in sift_down("end")),
        "    }",
        f"    for (long s = 0; s < {k}; s++) yr[s * {inner}] = {value(slot('s'))};",
        "}",
    ]
    return "\n".join(line for line in lines if line)
