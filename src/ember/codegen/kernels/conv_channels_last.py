"""conv_channels_last: FusedConv's channels-last forms (ops/layouts.py), which the
assign-layouts pass gives the pointwise and depthwise convolutions of chains like a text
recognizer's PP-LCNet backbone (21 of them in a row, alternating). Between two members of such
a chain the activation is NHWC, so neither transposes anything:

  pointwise  (1x1, stride 1, no padding, one group): a GEMM with the pixels as rows,
             Y[pixels][M] = X[pixels][C] W^T, W^T packed into panels at compile time; NCHW x
             at a chain's start is transposed into the step's scratch first, NCHW y at its end
             stored transposed from the tiles (the epilogue's `transposed`), the residual in
             y's layout added there;
  depthwise  (C a multiple of 16, strides of 1 or 2, kernels up to 8x8, no residual): the
             channels-last kernel of depthwise_nhwc.py, one vector of 16 channels per pixel;
             an NCHW end goes through a transposed copy in the step's scratch.

How threads share a step shows in `ember dump` as `split`: "rows" gives each thread a
contiguous run of output rows, the same in every step of the chain, so a thread reads the rows
it wrote the step before (session 17's finding: a core reading lines the other wrote costs 5x
on the Xeon); "channels" lets the GEMM split the output channels, where the weights outweigh
the activations (each thread would otherwise read all of them)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ember.codegen.c_writer import CWriter
from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.conv import ConvShape
from ember.codegen.kernels.depthwise_nhwc import DEPTHWISE_NHWC, DEPTHWISE_NHWC_C, LANES, depthwise_taps
from ember.codegen.kernels.gemm import Epilogue, gemm_call
from ember.codegen.kernels.layouts import MR, NR, PARALLEL_MIN_MACS, pack_panels, pad_to_panels, threads_for
from ember.codegen.kernels.registry import KernelOptions, KernelPlan, OpView
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.ops.fused import FusedConvAttrs
from ember.ops.layouts import TO_NCHW, channels_last, permuted
from ember.types import DType

# The most taps of a depthwise kernel it takes: up to 8x8, as the NCHW kernel's direct path.
MAX_TAPS = 64


def channels_last_refusal(view: OpView) -> str | None:
    """Why conv_channels_last cannot run this FusedConv channels last (None: it can). The
    assign-layouts pass asks it (through the cpu backend) before it converts a node, and
    selection asks it again of the converted node."""
    attrs = view.attrs
    if view.op != "FusedConv" or not isinstance(attrs, FusedConvAttrs):
        return "only FusedConv has a channels-last kernel"
    if view.results[0].dtype is not DType.FLOAT32:
        return "the channels-last convolution runs float32"
    if view.operand(0).rank != 4:
        return "the channels-last convolution takes 2-D convolutions (4-D x)"
    if not view.constant[1] or (view.operands[2] is not None and not view.constant[2]):
        return "the channels-last convolution packs its weights and bias at compile time: they must be constants"
    x = view.operand(0)
    channels = (permuted(x, TO_NCHW) if attrs.x_channels_last else x).shape[1]
    out_channels, per_group, kh, kw = view.operand(1).shape
    if tuple(attrs.dilations) != (1, 1):
        return "the channels-last convolution has no dilation"
    if (kh, kw) == (1, 1) and attrs.group == 1:
        if tuple(attrs.strides) != (1, 1) or any(attrs.pads):
            return "a channels-last 1x1 convolution has stride 1 and no padding"
        return None
    if attrs.group != channels or per_group != 1 or out_channels != channels:
        return "the channels-last convolution is pointwise (1x1, one group) or depthwise"
    if channels % LANES:
        return f"a channels-last depthwise convolution needs a multiple of {LANES} channels"
    if kh * kw > MAX_TAPS or not all(s in (1, 2) for s in attrs.strides):
        return f"a channels-last depthwise convolution takes strides of 1 or 2 and at most {MAX_TAPS} taps"
    if len(view.operands) > 3 and view.operands[3] is not None:
        return "a channels-last depthwise convolution has no residual"
    return None


# A pointwise convolution runs channels last only where its output channels fill this much of
# the GEMM's 32-wide panels: 16 of 32 ran a chain of them 1.45x slower than channels first, 48
# of 64 1.09x; 240 of 256 (a text recognizer's) 0.97x (Xeon).
MIN_PANEL_FILL = 0.875


def prefers_channels_last(view: OpView) -> bool:
    """Whether the cpu backend runs this FusedConv channels last, given NHWC neighbours: where
    conv_channels_last can, and a pointwise one fills its panels (MIN_PANEL_FILL)."""
    if channels_last_refusal(view) is not None:
        return False
    out_channels, _, kh, kw = view.operand(1).shape
    return (kh, kw) != (1, 1) or out_channels / (-(-out_channels // NR) * NR) >= MIN_PANEL_FILL


def _accepts(view: OpView) -> str | None:
    if not channels_last(view.attrs):
        return "conv_channels_last runs FusedConv's channels-last forms only (assign-layouts sets them)"
    return channels_last_refusal(view)


def _macs(s: ConvShape) -> int:
    return s.n_batch * s.out_channels * s.pixels * s.cg * s.kh * s.kw


def _split(s: ConvShape, threads: int) -> str:
    """Rows, unless a pointwise convolution's weights outweigh its activations (see the top)."""
    if threads > 1 and not s.depthwise and s.out_channels * s.channels > s.pixels * (s.channels + s.out_channels):
        return "channels"
    return "rows"


def _plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = ConvShape(instr)
    threads = threads_for(options.num_threads, _macs(s), PARALLEL_MIN_MACS // 4 if s.depthwise else PARALLEL_MIN_MACS)
    split = _split(s, threads)
    params = {"threads": min(threads, s.oh) if split == "rows" else threads, "split": split}  # a row a thread at least
    weights = s.w.constant()
    if s.depthwise:
        # NCHW x or y goes through a channels-last copy: one image's.
        scratch = (0 if s.x_nhwc else s.height * s.width) + (0 if s.y_nhwc else s.pixels)
        return KernelPlan(params, packed=[(s.w, "depthwise_taps", depthwise_taps(weights))],
                          scratch_bytes=scratch * s.channels * 4)
    packed = [(s.w, "pointwise_panels32", pack_panels(weights.reshape(s.out_channels, s.channels).T))]
    if s.b is not None:
        packed.append((s.b, "bias32", pad_to_panels(s.b.constant())))
    return KernelPlan(params, packed=packed, scratch_bytes=0 if s.x_nhwc else s.channels * s.pixels * 4)


@C_KERNELS.kernel("conv_channels_last", "FusedConv", accepts=_accepts, plan=_plan)
def emit_conv_channels_last(em: Emitter, instr: Instr) -> str:
    s = ConvShape(instr)
    threads, split = int(param(instr, "threads", 1)), str(param(instr, "split", "rows"))
    w = CWriter().line(f"const float *x = {em.pointer(s.x, const=True)};", f"float *y = {em.pointer(s.out)};")
    if s.depthwise:
        _depthwise(em, instr, s, w, threads)
    else:
        _pointwise(em, instr, s, w, threads, split)
    return w.text()


@contextmanager
def _runs(w: CWriter, rows: int, width: int, threads: int) -> Iterator[tuple[str, str]]:
    """A block over output rows [0, rows) of `width` pixels, split into one contiguous run per
    thread (the same every call: the pool runs task t on thread t where it can); yields the
    run's first and end pixel."""
    if threads <= 1:
        with w.block():
            yield "0", str(rows * width)
        return
    with w.block():
        # The count is a variable: with constant bounds GCC would call the combined
        # parallel-loop entry point, which Ember's pool does not provide.
        w.line(f"long runs = {threads};", f"#pragma omp parallel for num_threads({threads}) schedule(static)")
        with w.block("for (long t = 0; t < runs; t++)"):
            w.line(f"long q0 = t * {rows} / runs * {width}, q1 = (t + 1) * {rows} / runs * {width};")
            yield "q0", "q1"


def _pointwise(em: Emitter, instr: Instr, s: ConvShape, w: CWriter, threads: int, split: str) -> None:
    """One GEMM per image (one for the whole batch where x and y are both NHWC) and thread, the
    output pixels its rows. NCHW x is transposed into the scratch first: read in place as the
    GEMM's strided A, a 480 -> 480 layer on 6x40 took 10% longer (Xeon)."""
    m, c, p = s.out_channels, s.channels, s.pixels
    act, alpha, beta = s.activation
    bias = em.packed(instr, 1) if s.b is not None else "NULL"
    res = em.pointer(s.residual, const=True) if s.residual is not None else None
    images, rows = (1, s.n_batch * s.oh) if s.x_nhwc and s.y_nhwc else (s.n_batch, s.oh)
    with w.block(f"for (long nb = 0; nb < {images}; nb++)"):
        xn = f"x + nb * {c * p}"
        if not s.x_nhwc:
            w.line(f"float *xt = {em.scratch(instr)};",
                   f"ember_transpose_f32_threads({xn}, {c}, {p}, {p}, xt, {c}, {threads});")
            xn = "xt"
        with _runs(w, rows, s.ow, threads if split == "rows" else 1) as (q0, q1):
            # Output pixels q0..q1: rows of A and of NHWC y, columns of NCHW y (stored transposed).
            out, ldc = (f"y + nb * {m * p} + {q0} * {m}", m) if s.y_nhwc else (f"y + nb * {m * p} + {q0}", p)
            residual = "NULL" if res is None else f"{res} + nb * {m * p} + {q0}" + (f" * {m}" if s.y_nhwc else "")
            w.line(Epilogue(bias=bias, residual=residual, ld_residual=ldc, activation=act, alpha=alpha, beta=beta,
                            transposed=not s.y_nhwc).c_init(),
                   gemm_call(m=f"{q1} - {q0}", n=m, k=c, a=f"{xn} + {q0} * {c}", a_layout=(c, 1, MR * c),
                             b_packed=em.packed(instr), ldb=0, c=out, ldc=ldc,
                             threads=1 if split == "rows" else threads))


def _depthwise(em: Emitter, instr: Instr, s: ConvShape, w: CWriter, threads: int) -> None:
    """Per image: NCHW x transposed into the scratch, each thread's output rows, NCHW y
    transposed out of the scratch."""
    em.define(DEPTHWISE_NHWC, DEPTHWISE_NHWC_C)
    c, hw, p = s.channels, s.height * s.width, s.pixels
    act, alpha, beta = s.activation
    bias = em.pointer(s.b, const=True) if s.b is not None else "NULL"
    w.line(f"float *scratch = {em.scratch(instr)};", "(void)scratch;",
           Epilogue(activation=act, alpha=alpha, beta=beta).c_init())
    with w.block(f"for (long nb = 0; nb < {s.n_batch}; nb++)"):
        if s.x_nhwc:
            w.line(f"const float *e = x + nb * {hw * c};")
        else:
            w.line("float *e = scratch;",
                   f"ember_transpose_f32_threads(x + nb * {c * hw}, {c}, {hw}, {hw}, e, {c}, {threads});")
        w.line(f"float *d = {f'y + nb * {p * c}' if s.y_nhwc else f'scratch + {0 if s.x_nhwc else hw * c}'};")
        with _runs(w, s.oh, s.ow, threads) as (q0, q1):
            w.line(f"{DEPTHWISE_NHWC}(e, {c}, {s.height}, {s.width}, {c}, {em.packed(instr)}, {bias}, d, {s.ow}, "
                   f"{s.kh}, {s.kw}, {s.sh}, {s.sw}, {s.pt}, {s.pl}, &ep, 0, {c}, {q0}, {q1});")
        if not s.y_nhwc:
            w.line(f"ember_transpose_f32_threads(d, {p}, {c}, {c}, y + nb * {c * p}, {p}, {threads});")
