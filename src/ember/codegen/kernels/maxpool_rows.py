"""maxpool_rows: 2-D MaxPool without dilation over float32 or 8-bit tensors (the quantized
graph's pools, which fold-qdq moves onto the integers), tried before maxpool_loops. Per output
row, the column maxima of the window's input rows go into a row padded with the type's lowest
value on both sides (one pass the compiler vectorizes), and each output is the max of kw
consecutive (stride apart) cells of that row: no bounds checks in either loop. Same result as
the reference (the window's max, padding never larger than a real cell; a NaN in the window
gives NaN). ResNet-18's 3x3 stride-2 pool over 64 x 112 x 112 ran 372 us on 2 threads as
maxpool_loops (per-cell bounds checks) against 70 us for OpenVINO's."""
from __future__ import annotations

from ember.codegen.c_types import c_type, lowest
from ember.codegen.c_writer import CWriter
from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.layouts import threads_for
from ember.codegen.kernels.registry import Kernel, KernelOptions, KernelPlan, OpView
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.types import DType

DTYPES = (DType.FLOAT32, DType.UINT8, DType.INT8)
# The padded row lives on the stack.
MAX_ROW_BYTES = 64 * 1024


def _padded_width(kernel_w: int, stride_w: int, pad_left: int, width: int, out_w: int) -> int:
    """Cells of the padded row: every column a window reads, and the input's own."""
    return max((out_w - 1) * stride_w + kernel_w, pad_left + width)


def _accepts(view: OpView) -> str | None:
    x, attrs = view.operand(0), view.attrs
    if x.rank != 4 or x.dtype not in DTYPES or any(d != 1 for d in attrs.dilations):
        return "maxpool_rows takes 2-D float32 or 8-bit pools without dilation"
    width = _padded_width(attrs.kernel[1], attrs.strides[1], attrs.pads[1], x.shape[3], view.results[0].shape[3])
    if width * x.dtype.itemsize > MAX_ROW_BYTES:
        return f"maxpool_rows keeps a padded row of at most {MAX_ROW_BYTES} bytes on the stack"
    return None


def _plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    out = instr.operand(0)
    kh, kw = instr.attrs.kernel
    return KernelPlan({"threads": threads_for(options.num_threads, out.type.size * kh * kw)})


def _larger(candidate: str, current: str, is_float: bool) -> str:
    """`candidate` where it is larger than `current` or NaN (NaN then stays: nothing is larger)."""
    nan = f"{candidate} != {candidate} || " if is_float else ""
    return f"{nan}{candidate} > {current} ? {candidate} : {current}"


def emit_maxpool_rows(em: Emitter, instr: Instr) -> str:
    out, x = instr.required()
    attrs = instr.attrs
    n, c, h, w = x.type.shape
    oh, ow = out.type.shape[2:]
    (kh, kw), (sh, sw) = attrs.kernel, attrs.strides
    pt, pl = attrs.pads[0], attrs.pads[1]
    t, is_float = c_type(x.type.dtype), x.type.dtype.is_float
    low = lowest(x.type.dtype)
    width = _padded_width(kw, sw, pl, w, ow)
    threads = int(param(instr, "threads", 1))
    writer = CWriter().line(f"const {t} *x = {em.pointer(x, const=True)};", f"{t} *y = {em.pointer(out)};")
    # Thread `part` takes a contiguous run of output rows of every channel, the same every call:
    # the rows the previous step's same thread wrote where that step split its pixels.
    if threads > 1:
        writer.line(f"#pragma omp parallel for num_threads({threads}) schedule(static, 1)")
        rows = writer.block(f"for (long part = 0; part < {threads}; part++)")
        bounds = f"long i0 = {oh} * part / {threads}, i1 = {oh} * (part + 1) / {threads};"
    else:
        rows, bounds = writer.block(), f"long i0 = 0, i1 = {oh};"
    with rows:
        writer.line(bounds)
        with writer.block(f"for (long item = 0; item < {n * c}; item++)"):
            writer.line(f"{t} cols[{width}];", f"const {t} *xc = x + item * {h * w};",
                        f"{t} *yc = y + item * {oh * ow};")
            with writer.block("for (long i = i0; i < i1; i++)"):
                writer.line(f"for (long j = 0; j < {width}; j++) cols[j] = {low};",
                            f"long top = i * {sh} - {pt}, first = top < 0 ? 0 : top, "
                            f"last = top + {kh} < {h} ? top + {kh} : {h};")
                with writer.block("for (long ih = first; ih < last; ih++)"):
                    writer.line(f"const {t} *row = xc + ih * {w};",
                                f"for (long j = 0; j < {w}; j++) cols[{pl} + j] = "
                                f"{_larger('row[j]', f'cols[{pl} + j]', is_float)};")
                with writer.block(f"for (long j = 0; j < {ow}; j++)"):
                    writer.line(f"{t} m = cols[j * {sw}];")
                    for v in range(1, kw):
                        writer.line(f"m = {_larger(f'cols[j * {sw} + {v}]', 'm', is_float)};")
                    writer.line(f"yc[i * {ow} + j] = m;")
    return writer.text()


C_KERNELS.add(Kernel("maxpool_rows", ("MaxPool",), emit_maxpool_rows, accepts=_accepts, plan=_plan), first=True)
