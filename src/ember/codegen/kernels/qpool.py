"""maxpool_bytes: 2-D MaxPool over 8-bit tensors (the quantized graph's pools, which fold-qdq
moves onto the integers), tried before maxpool_loops. Per output row, the column maxima of
the window's input rows go into a row padded with the type's minimum on both sides (one pass
the compiler vectorizes), and each output is the max of kw consecutive (stride apart) cells of
that row: no bounds checks in either loop. Same result as the reference (the window's max,
padding never larger than a real cell)."""
from __future__ import annotations

from ember.codegen.c_types import c_type, lowest
from ember.codegen.c_writer import CWriter
from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.layouts import threads_for
from ember.codegen.kernels.registry import Kernel, KernelOptions, KernelPlan, OpView
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.types import DType


def _accepts(view: OpView) -> str | None:
    x = view.operand(0)
    if x.rank != 4 or x.dtype not in (DType.UINT8, DType.INT8) or any(d != 1 for d in view.attrs.dilations):
        return "maxpool_bytes takes 2-D 8-bit pools without dilation"
    return None


def _plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    out = instr.operand(0)
    kh, kw = instr.attrs.kernel
    return KernelPlan({"threads": threads_for(options.num_threads, out.type.size * kh * kw)})


def emit_maxpool_bytes(em: Emitter, instr: Instr) -> str:
    out, x = instr.required()
    attrs = instr.attrs
    n, c, h, w = x.type.shape
    oh, ow = out.type.shape[2:]
    (kh, kw), (sh, sw) = attrs.kernel, attrs.strides
    pt, pl = attrs.pads[0], attrs.pads[1]
    t = c_type(x.type.dtype)
    low = lowest(x.type.dtype)
    span = (ow - 1) * sw + kw  # padded columns the windows read
    width = max(span, pl + w)
    threads = int(param(instr, "threads", 1))
    writer = CWriter().line(f"const {t} *x = {em.pointer(x, const=True)};", f"{t} *y = {em.pointer(out)};")
    if threads > 1:
        writer.line(f"#pragma omp parallel for num_threads({threads}) schedule(static)")
    with writer.block(f"for (long item = 0; item < {n * c}; item++)"):
        writer.line(f"{t} cols[{width}];", f"const {t} *xc = x + item * {h * w};", f"{t} *yc = y + item * {oh * ow};")
        with writer.block(f"for (long i = 0; i < {oh}; i++)"):
            writer.line(f"for (long j = 0; j < {width}; j++) cols[j] = {low};",
                        f"long top = i * {sh} - {pt}, first = top < 0 ? 0 : top, "
                        f"last = top + {kh} < {h} ? top + {kh} : {h};")
            with writer.block("for (long ih = first; ih < last; ih++)"):
                writer.line(f"const {t} *row = xc + ih * {w};",
                            f"for (long j = 0; j < {w}; j++) cols[{pl} + j] = row[j] > cols[{pl} + j] ? row[j] : "
                            f"cols[{pl} + j];")
            with writer.block(f"for (long j = 0; j < {ow}; j++)"):
                writer.line(f"{t} m = cols[j * {sw}];")
                for v in range(1, kw):
                    writer.line(f"m = cols[j * {sw} + {v}] > m ? cols[j * {sw} + {v}] : m;")
                writer.line(f"yc[i * {ow} + j] = m;")
    return writer.text()


C_KERNELS.add(Kernel("maxpool_bytes", ("MaxPool",), emit_maxpool_bytes, accepts=_accepts, plan=_plan), first=True)
