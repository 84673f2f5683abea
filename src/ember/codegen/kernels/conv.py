"""Convolution and pooling kernels (NCHW), one registry entry per algorithm. A 1-D convolution
[N, C, W] runs as a 2-D one with H = 1 (ConvShape inserts the unit row), so it gets every
2-D algorithm; 3-D convolutions are in conv_nd.py, pooling beyond 2-D in pooling.py.

Conv variants, tried in this order (the first that applies is selected; `ember dump --stage
lir` shows which, with its scratch and packed weights):
  conv_depthwise       one input and one output channel per group: a direct kernel reading
                       the input in place, one machine-width vector of outputs per row position;
  conv_winograd4       3x3 stride-1 convolutions with 32+ channels each way on maps of 12x12 and
                       up: F(4x4, 3x3) channel-last, weights transformed at compile time;
  conv_winograd        3x3 stride-1 convolutions with 32+ channels each way and enough 2x2
                       output tiles: F(2x2, 3x3), weights transformed at compile time;
  conv_shallow         a spatial kernel over at most 4 input channels (an image's) with output
                       rows a vector wide or more: direct, output row by output row, with the
                       taps read from phase rows in L1 and the epilogue in registers;
  conv_taps            strided convolutions with deep reductions onto maps 16+ pixels wide: the
                       pixels as GEMM rows read in place through the taps' offsets into a padded
                       channel-last copy of the input, W^T packed at compile time;
  conv_pixel_rows      small maps with many output channels, where a cost model of the padded
                       GEMM says so: Y^T = R W^T, R the im2row of the channel-last input (the
                       pixels as GEMM rows), W^T packed at compile time;
  conv_direct          equal strides, no dilation: GEMM reading the input through phase planes
                       and an offset table (ember_conv_direct);
  conv_gemm            the rest: GEMM per image and group over the input in place (1x1;
                       b="panels", copied into panels at run time, where the map's row stride
                       aliases in the caches) or im2col panels packed at run time (dilated).
Bias, residual and activation run in the tile epilogue everywhere."""
from __future__ import annotations

import math

from ember.codegen.c_constants import SHALLOW_MAX_K
from ember.codegen.c_types import c_type, lowest
from ember.codegen.c_writer import CWriter, init
from ember.codegen.emitter import Emitter, param, threads_pragma
from ember.codegen.kernels.gemm import Epilogue, gemm_b_scratch, gemm_call
from ember.codegen.kernels.layouts import (
    MR,
    PARALLEL_MIN_MACS,
    DirectLayout,
    PixelRowsLayout,
    Winograd4Layout,
    WinogradLayout,
    depthwise_kernel,
    depthwise_scratch_bytes,
    shallow_scratch_bytes,
    taps_scratch_bytes,
    threads_for,
)
from ember.codegen.kernels.registry import KernelOptions, KernelPlan, OpView, is_whole_weight
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.ops.fused import FusedConvAttrs
from ember.ops.layouts import TO_NCHW, channels_last, permuted
from ember.types import DType

CONV_OPS = ("Conv", "FusedConv")


def accepts_conv(view: OpView) -> str | None:
    """The convolution kernels cover 1-D and 2-D float32 convolutions. They read the weights
    in place as the GEMM's A operand, so the weights may arrive at run time (the variants that
    transform them at compile time, Winograd and the transposed 1x1, need them constant).
    Channels-last forms are conv_channels_last's (conv_channels_last.py)."""
    if channels_last(view.attrs):
        return "a channels-last FusedConv runs on conv_channels_last only"
    if view.results[0].dtype is not DType.FLOAT32:
        return "the GEMM kernels run float32 (convolutions included)"
    if view.operand(0).rank not in (3, 4):
        return "only 1-D, 2-D (NCHW) and 3-D convolutions have C kernels"
    return None


class ConvOperands:
    """What every convolution kernel reads of a Conv/FusedConv instruction: its buffers (bias
    and residual may be absent), the epilogue's activation and the convolution attributes."""

    def __init__(self, instr: Instr) -> None:
        base = instr.base_operands
        self.out, self.x, self.w = instr.operand(0), instr.operand(1), instr.operand(2)
        self.b = base[3] if len(base) > 3 else None
        self.residual = base[4] if len(base) > 4 else None
        attrs = instr.attrs
        if isinstance(attrs, FusedConvAttrs):
            self.activation = (attrs.activation, attrs.alpha, attrs.beta)
            self.conv = attrs.conv
            self.x_nhwc, self.y_nhwc = attrs.x_channels_last, attrs.y_channels_last
        else:
            self.activation = ("none", 0.0, 0.0)
            self.conv = attrs
            self.x_nhwc = self.y_nhwc = False


class ConvShape(ConvOperands):
    """The geometry of one Conv/FusedConv instruction, in NCHW terms whatever the layouts of x
    and y (x_nhwc, y_nhwc: FusedConv's channels-last forms, which only conv_channels_last runs)."""

    def __init__(self, instr: Instr) -> None:
        super().__init__(instr)
        conv = self.conv
        x_type, y_type = self.x.type, self.out.type
        x_shape = (permuted(x_type, TO_NCHW) if self.x_nhwc else x_type).shape
        y_shape = (permuted(y_type, TO_NCHW) if self.y_nhwc else y_type).shape
        w_shape = self.w.type.shape
        strides, dilations, pads = tuple(conv.strides), tuple(conv.dilations), tuple(conv.pads)
        if len(x_shape) == 3:
            # 1-D as 2-D with H = 1: a unit row, no padding along it, and the W axis's stride
            # and dilation on both axes (they never move along H, and equal strides keep
            # conv_direct's rule).
            x_shape, w_shape, y_shape = ((t[0], t[1], 1, t[2]) for t in (x_shape, w_shape, y_shape))
            strides, dilations, pads = strides * 2, dilations * 2, (0, pads[0], 0, pads[1])
        self.strides, self.dilations, self.pads = strides, dilations, pads
        self.n_batch, self.channels, self.height, self.width = x_shape
        self.out_channels, self.cg, self.kh, self.kw = w_shape
        self.groups = conv.group
        self.oh, self.ow = y_shape[2:]
        (self.sh, self.sw), (self.dh, self.dw) = strides, dilations
        self.pt, self.pl = pads[0], pads[1]
        self.pixels = self.oh * self.ow
        self.mg = self.out_channels // self.groups
        self.k = self.cg * self.kh * self.kw
        self.depthwise = self.cg == 1 and self.out_channels == self.groups
        self.pointwise = self.kh == self.kw == 1 and strides == (1, 1) and pads == (0, 0, 0, 0)

    def geometry(self, name: str, x: str, all_channels: bool = False) -> str:
        """`ember_conv_geom name = { .x = x, .C = ..., ... };` for one group of this convolution
        (C its input channels), or for all of its channels (the depthwise kernel's)."""
        return init("ember_conv_geom", name, x=x, C=self.channels if all_channels else self.cg, H=self.height,
                    W=self.width, KH=self.kh, KW=self.kw, SH=self.sh, SW=self.sw, PH=self.pt, PW=self.pl,
                    DH=self.dh, DW=self.dw, OH=self.oh, OW=self.ow)

    def gemm_threads(self, options: KernelOptions) -> int:
        return threads_for(options.num_threads, self.mg * self.pixels * self.k)

    def writer(self, em: Emitter) -> CWriter:
        """A writer holding the pointers every convolution kernel starts from."""
        return CWriter().line(*self.prologue(em))

    def prologue(self, em: Emitter) -> list[str]:
        return [
            f"const float *x = {em.pointer(self.x, const=True)};",
            f"float *y = {em.pointer(self.out)};",
            f"const float *bias = {em.pointer(self.b, const=True) if self.b is not None else 'NULL'};",
            f"const float *res = {em.pointer(self.residual, const=True) if self.residual is not None else 'NULL'};",
            "(void)bias; (void)res;",
        ]

    def epilogue(self, **fields) -> Epilogue:
        act, alpha, beta = self.activation
        return Epilogue(activation=act, alpha=alpha, beta=beta, **fields)


# conv_depthwise --------------------------------------------------------------------------


def _depthwise_applies(instr: Instr, options: KernelOptions) -> bool:
    return ConvShape(instr).depthwise


def _depthwise_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = ConvShape(instr)
    work = s.channels * s.pixels * s.kh * s.kw
    threads = options.num_threads if work >= PARALLEL_MIN_MACS // 4 else 1
    return KernelPlan({"threads": threads}, scratch_bytes=depthwise_scratch_bytes(
        (s.oh, s.ow), (s.kh, s.kw), (s.sh, s.sw), (s.dh, s.dw), threads))


@C_KERNELS.kernel("conv_depthwise", *CONV_OPS, accepts=accepts_conv, applies=_depthwise_applies,
                  plan=_depthwise_plan)
def emit_conv_depthwise(em: Emitter, instr: Instr) -> str:
    s = ConvShape(instr)
    image, plane = s.channels * s.height * s.width, s.out_channels * s.pixels
    w = s.writer(em).line(s.epilogue().c_init())
    with w.block(f"for (long nb = 0; nb < {s.n_batch}; nb++)"):
        w.line(s.geometry("g", f"x + nb * {image}", all_channels=True))
        w.call("ember_depthwise", "&g", depthwise_kernel((s.kh, s.kw), (s.sh, s.sw), (s.dh, s.dw)),
               em.pointer(s.w, const=True), "bias", f"res ? res + nb * {plane} : NULL",
               f"y + nb * {plane}", "&ep", em.scratch(instr), param(instr, "threads", 1))
    return w.text()


# conv_winograd4 --------------------------------------------------------------------------


def _winograd_applies_where(layout: type[Winograd4Layout] | type[WinogradLayout]):
    """A Winograd variant's `applies`: enabled, one group, constant weights (transformed at
    compile time), and the layout's own rule on the geometry."""

    def applies(instr: Instr, options: KernelOptions) -> bool:
        s = ConvShape(instr)
        return options.winograd and s.groups == 1 and is_whole_weight(s.w) and layout.applies(
            (s.kh, s.kw), (s.sh, s.sw), (s.dh, s.dw), s.cg, s.mg, (s.oh, s.ow))

    return applies


_winograd4_applies = _winograd_applies_where(Winograd4Layout)


def _winograd_feasible(instr: Instr, options: KernelOptions) -> bool:
    """What the Winograd kernels can run, cost aside: enabled, one group, constant weights,
    3x3, stride 1, no dilation (any channel count and map size: edge tiles are padded)."""
    s = ConvShape(instr)
    return (options.winograd and s.groups == 1 and is_whole_weight(s.w) and (s.kh, s.kw) == (3, 3)
            and (s.sh, s.sw) == (1, 1) and (s.dh, s.dw) == (1, 1))


def _winograd4_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = ConvShape(instr)
    threads = s.gemm_threads(options)
    layout = Winograd4Layout(s.cg, s.mg, (s.oh, s.ow), threads)
    return KernelPlan({"threads": threads, "block_tiles": layout.block,
                       "split": "tiles" if layout.tile_split else "gemms"},
                      packed=[(s.w, "winograd_f4x3", layout.transformed_weights(s.w.constant()))],
                      scratch_bytes=layout.scratch_bytes())


@C_KERNELS.kernel("conv_winograd4", *CONV_OPS, accepts=accepts_conv, applies=_winograd4_applies,
                  feasible=_winograd_feasible, plan=_winograd4_plan)
def emit_conv_winograd4(em: Emitter, instr: Instr) -> str:
    return winograd_loops(em, instr, "ember_winograd4", em.packed(instr))


def winograd_loops(em: Emitter, instr: Instr, function: str, weights: str) -> str:
    """Per image, `function`(geometry, M, transformed weights, bias, residual, y, epilogue,
    scratch, threads): the call every Winograd variant's library entry takes."""
    s = ConvShape(instr)
    w = s.writer(em).line(s.epilogue().c_init())
    with w.block(f"for (long nb = 0; nb < {s.n_batch}; nb++)"):
        w.line(s.geometry("g", f"x + nb * {s.channels * s.height * s.width}"),
               f"long base = nb * {s.out_channels * s.pixels};")
        w.call(function, "&g", s.mg, weights, "bias", "res ? res + base : NULL", "y + base", "&ep",
               em.scratch(instr), param(instr, "threads", 1))
    return w.text()


# conv_winograd ---------------------------------------------------------------------------


_winograd_applies = _winograd_applies_where(WinogradLayout)


def _winograd_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = ConvShape(instr)
    layout = WinogradLayout(s.cg, s.mg, (s.oh, s.ow))
    threads = s.gemm_threads(options)
    return KernelPlan({"threads": threads}, packed=[(s.w, "winograd_f2x3", layout.transformed_weights(s.w.constant()))],
                      scratch_bytes=layout.scratch_bytes(threads))


@C_KERNELS.kernel("conv_winograd", *CONV_OPS, accepts=accepts_conv, applies=_winograd_applies,
                  feasible=_winograd_feasible, plan=_winograd_plan)
def emit_conv_winograd(em: Emitter, instr: Instr) -> str:
    return winograd_loops(em, instr, "ember_winograd", em.packed(instr))


# conv_shallow ----------------------------------------------------------------------------


def _shallow_feasible(instr: Instr, options: KernelOptions) -> bool:
    """What conv_shallow can run: one group, no dilation, a reduction of at most SHALLOW_MAX_K."""
    s = ConvShape(instr)
    return s.groups == 1 and (s.dh, s.dw) == (1, 1) and s.k <= SHALLOW_MAX_K


def _shallow_applies(instr: Instr, options: KernelOptions) -> bool:
    """A network's first layer: a spatial kernel over at most SHALLOW_MAX_CHANNELS input
    channels, a reduction of at most SHALLOW_APPLIES_MAX_K, output rows a vector wide or more."""
    s = ConvShape(instr)
    return (_shallow_feasible(instr, options) and s.kh * s.kw > 1 and s.cg <= SHALLOW_MAX_CHANNELS
            and s.k <= SHALLOW_APPLIES_MAX_K and s.ow >= SHALLOW_MIN_WIDTH)


# What conv_shallow takes by default. Xeon, 1 thread, against conv_direct: 3x3 stride 2 over
# 3 channels on 224x224, 32 or 64 output channels, 0.73-0.80 of its time, stride 1 0.76; in
# MobileNetV2 0.95-0.98 of the whole model. Deeper reductions gained little alone (5x5: 0.93-0.98)
# and lost in a model: ResNet-18's 7x7 stem (K = 147, its 37 KB of weights and 21 KB of phase
# rows past the L1) made the model 4% slower. A measured search (tune=True) still tries it up
# to SHALLOW_MAX_K.
SHALLOW_MAX_CHANNELS = 4
SHALLOW_APPLIES_MAX_K = 36
SHALLOW_MIN_WIDTH = 16


def _shallow_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = ConvShape(instr)
    threads = min(s.gemm_threads(options), s.oh)
    return KernelPlan({"threads": threads},
                      scratch_bytes=shallow_scratch_bytes(s.cg, (s.kh, s.kw), s.sw, s.ow, threads))


@C_KERNELS.kernel("conv_shallow", *CONV_OPS, accepts=accepts_conv, applies=_shallow_applies,
                  feasible=_shallow_feasible, plan=_shallow_plan)
def emit_conv_shallow(em: Emitter, instr: Instr) -> str:
    """A convolution over a few input channels (an image's) computed directly, output row by
    output row, with bias and activation in registers (ember_conv_shallow): the GEMM paths
    spend more on packing and storing than on the few multiply-adds per output there."""
    s = ConvShape(instr)
    image, plane = s.channels * s.height * s.width, s.out_channels * s.pixels
    w = s.writer(em).line(s.epilogue().c_init())
    with w.block(f"for (long nb = 0; nb < {s.n_batch}; nb++)"):
        w.line(s.geometry("g", f"x + nb * {image}"))
        w.call("ember_conv_shallow", "&g", s.mg, em.pointer(s.w, const=True), "bias",
               f"res ? res + nb * {plane} : NULL", f"y + nb * {plane}", "&ep", em.scratch(instr),
               param(instr, "threads", 1))
    return w.text()


# conv_taps -------------------------------------------------------------------------------


def _taps_feasible(instr: Instr, options: KernelOptions) -> bool:
    """What conv_taps can run: one group, constant weights (packed at compile time), no dilation."""
    s = ConvShape(instr)
    return s.groups == 1 and is_whole_weight(s.w) and (s.dh, s.dw) == (1, 1)


def _taps_applies(instr: Instr, options: KernelOptions) -> bool:
    """Strided convolutions with a deep reduction over a map at least TAPS_MIN_WIDTH wide, whose
    weights fit in a core's L2 (options.l2_bytes) and fill their 32-column panels, on 2 or more
    threads (see below)."""
    s = ConvShape(instr)
    panels_padded = math.ceil(s.mg / 32) * 32
    return (_taps_feasible(instr, options) and s.gemm_threads(options) >= 2 and min(s.sh, s.sw) >= 2
            and s.k >= TAPS_MIN_K and s.ow >= TAPS_MIN_WIDTH and s.mg * s.k * 4 <= options.l2_bytes
            and panels_padded * 4 <= s.mg * 5)  # at most a fifth of the panels' columns padding


# Where conv_taps takes a convolution by default. Xeon (2 MB L2), one convolution alone, against
# the kernel chosen before it (time ratio at 1 / 2 threads): 3x3 stride 2, 64 -> 128 onto 28x28
# (ResNet-18's) 0.78 / 0.70, 32 -> 64 onto 56x56 0.80 / 0.75; in ResNet-18 that layer 926 -> 848
# us at 1 thread, 545 -> 428 at 2 (per-step times, both programs in one process). Each 8-pixel
# tile pays a transposed store (256 values; 5% of the tile at K = 576), so a shallow reduction
# loses: a 1x1 stride-2 shortcut (K = 64) 1.23 / 0.97, the 7x7 stem over 3 channels (K = 147)
# 1.09 / 1.08; so do stride 1 (3x3 16 -> 32: 1.13 / 1.08, where conv_direct reads its rows at
# their own stride), narrow maps (onto 14x14, pixel rows: 1.01 / 1.00, in ResNet-18 5% slower;
# onto 10x10 1.14 at 1 thread: 8-pixel blocks fill rows badly) and weights past the L2 (256 ->
# 512 onto 7x7, 4.7 MB: 0.81 / 0.88 alone, warm, but 1045 -> 1111 us in ResNet-18, where they
# come from memory).
# On one thread the layer is faster too (926 -> 848 us), yet ResNet-18 as a whole measured
# 1.3-1.6% slower with it (`bench/ab_revisions.py`, five runs; alternating single-model
# processes, 16 pairs: 1.013 [0.97, 1.07]), the time going to its memory-bound Winograd layers downstream
# (onto 14x14, 9.4 MB of transformed weights each, streamed at about 8 GB/s: +50-120 us each),
# which no pad of the weight blob restored (they move 10% with the blob's offset alone, kernels
# unchanged). Until that is understood one thread keeps conv_direct there; 2 threads gained
# (0.98-0.99 end to end). A measured search (tune=True) still times it on one thread.
TAPS_MIN_K = 256
TAPS_MIN_WIDTH = 16


def _taps_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = ConvShape(instr)
    weights = s.w.constant().reshape(s.mg, s.cg, s.kh, s.kw)
    threads = min(s.gemm_threads(options), s.oh)
    # W^T tap-major in panels, as conv_pixel_rows packs it (its rows are the tap offsets' order)
    panels = _pixel_rows_layout(s).weights(weights)
    return KernelPlan({"threads": threads}, packed=[(s.w, "pixel_rows_panels32", panels)],
                      scratch_bytes=taps_scratch_bytes(s.cg, (s.kh, s.kw), (s.sh, s.sw), (s.oh, s.ow)))


@C_KERNELS.kernel("conv_taps", *CONV_OPS, accepts=accepts_conv, applies=_taps_applies, feasible=_taps_feasible,
                  plan=_taps_plan)
def emit_conv_taps(em: Emitter, instr: Instr) -> str:
    """A convolution with the output pixels as the GEMM's rows, read in place (ember_conv_taps):
    the input made channel-last into a zero-padded map, then each 8-pixel run of an output row
    multiplied through the kernel taps' offsets into that map by W^T (packed tap-major at compile
    time), with y stored NCHW from the tiles. No im2row: conv_pixel_rows copies every pixel's
    K inputs first, and conv_direct's phase planes read B unaligned."""
    s = ConvShape(instr)
    image, plane = s.channels * s.height * s.width, s.out_channels * s.pixels
    w = s.writer(em).line(s.epilogue().c_init())
    with w.block(f"for (long nb = 0; nb < {s.n_batch}; nb++)"):
        w.line(s.geometry("g", f"x + nb * {image}"))
        w.call("ember_conv_taps", "&g", s.mg, em.packed(instr), "bias", f"res ? res + nb * {plane} : NULL",
               f"y + nb * {plane}", "&ep", em.scratch(instr), param(instr, "threads", 1))
    return w.text()


# conv_pixel_rows -------------------------------------------------------------------------


def _pixel_rows_layout(s: ConvShape) -> PixelRowsLayout:
    return PixelRowsLayout(s.cg, s.mg, (s.height, s.width), (s.oh, s.ow), (s.kh, s.kw), s.pointwise)


def _pixel_rows_applies(instr: Instr, options: KernelOptions) -> bool:
    """Where the cost model puts it below the kernel that would run otherwise (conv_direct's
    grid or conv_gemm's pixels as columns): small maps with many output channels, whose
    weights fit in a core's L2 (options.l2_bytes, the host's when compiling for it)."""
    s = ConvShape(instr)
    if s.groups != 1 or s.mg < 32 or not is_whole_weight(s.w):
        return False
    layout = _pixel_rows_layout(s)
    if s.mg * layout.depth * 4 > options.l2_bytes:
        # Weights past the L2 stream from memory every run, and streamed as the GEMM's packed
        # B panels, each swept past a few row blocks of pixels, they ran slower than the cost
        # model says; as the columns kernels' A, 8 rows at a time, faster. ResNet-18 on a Xeon
        # (2 MB L2), `ember.compile(tune=True)`'s per-step times: its 3x3 convolutions onto 7x7
        # maps (9.4 MB of weights) conv_direct 1851 against 2152 us at 1 thread, 844 against
        # 1071 at 2; the 4.7 MB one 909 against 976, 477 against 528; while pixel rows stayed
        # ahead where the weights fit: 1.2 MB onto 14x14, 695 against 831 us; 0.7 MB onto the
        # OCR recognizer's 1x20 map (K = 2880), 65 against 99 us.
        return False
    columns = DirectLayout(s.cg, (s.oh, s.ow), (s.kh, s.kw), s.sh).grid if _direct_applies(instr, options) else s.pixels
    return layout.cost() < layout.columns_cost(columns)


# A measured search times conv_pixel_rows only where its im2row copy stays this small.
PIXEL_ROWS_MAX_SCRATCH = 16 << 20


def _pixel_rows_feasible(instr: Instr, options: KernelOptions) -> bool:
    """What conv_pixel_rows can run, cost aside: one group, constant weights (packed at compile
    time), no dilation, and an im2row of at most PIXEL_ROWS_MAX_SCRATCH bytes."""
    s = ConvShape(instr)
    return (s.groups == 1 and is_whole_weight(s.w) and (s.dh, s.dw) == (1, 1)
            and _pixel_rows_layout(s).scratch_bytes() <= PIXEL_ROWS_MAX_SCRATCH)


def _pixel_rows_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = ConvShape(instr)
    layout = _pixel_rows_layout(s)
    weights = s.w.constant().reshape(s.mg, s.cg, s.kh, s.kw)  # a 1-D convolution's too (H = 1)
    return KernelPlan({"threads": s.gemm_threads(options)}, packed=[(s.w, "pixel_rows_panels32",
                                                                     layout.weights(weights))],
                      scratch_bytes=layout.scratch_bytes())


@C_KERNELS.kernel("conv_pixel_rows", *CONV_OPS, accepts=accepts_conv, applies=_pixel_rows_applies,
                  feasible=_pixel_rows_feasible, plan=_pixel_rows_plan)
def emit_conv_pixel_rows(em: Emitter, instr: Instr) -> str:
    """A convolution over a small map as Y^T = R W^T: R, the im2row of the input, has a row
    per output pixel (ember_conv_rows: the input made channel-last, then one copy per kernel
    tap), so the pixels become the GEMM's rows, in 8-row blocks, and the many output channels
    its 32-wide columns, which wastes far less than 49 pixels padded to two 32-column panels.
    The GEMM stores Y^T row-major with bias and activation in registers, and a transpose
    writes NCHW y; the residual, when there is one, comes after it, then the activation
    (ember_transpose_f32 in ember_transpose.c says why this beats strided A and tiles stored
    transposed)."""
    s = ConvShape(instr)
    layout = _pixel_rows_layout(s)
    m, p, image = s.mg, s.pixels, s.channels * s.height * s.width
    hwc = 0 if s.pointwise else layout.in_pixels * s.cg
    threads = int(param(instr, "threads", 1))
    act, alpha, beta = s.activation
    in_registers = s.residual is None
    epilogue = Epilogue(bias="bias", activation=act if in_registers else "none", alpha=alpha, beta=beta)
    call = gemm_call(m=p, n=m, k=s.k, a="rows", a_layout=(s.k, 1, MR * s.k), b_packed=em.packed(instr), ldb=0,
                     c="yt", ldc=m, threads=threads)
    w = s.writer(em)
    with w.block(f"for (long nb = 0; nb < {s.n_batch}; nb++)"):
        w.line(s.geometry("g", f"x + nb * {image}"),
               f"float *hwc = {em.scratch(instr)}, *rows = hwc + {hwc}, *yt = rows + {p * s.k}, "
               f"*yn = y + nb * {m * p};",
               f"ember_conv_rows(&g, hwc, rows, {threads});",
               epilogue.c_init(), call,
               f"ember_transpose_f32_threads(yt, {p}, {m}, {m}, yn, {p}, {threads});")
        if not in_registers:
            w.line(s.epilogue().c_init("finish"),
                   f"ember_finish_span_threads(yn, res + nb * {m * p}, {m * p}, &finish, {threads});")
    return w.text()


# conv_direct -----------------------------------------------------------------------------


def _direct_applies(instr: Instr, options: KernelOptions) -> bool:
    s = ConvShape(instr)
    return s.sh == s.sw and s.dh == s.dw == 1 and not (s.kh == s.kw == 1 and s.sh == 1 and s.pads == (0, 0, 0, 0))


def _direct_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = ConvShape(instr)
    layout = DirectLayout(s.cg, (s.oh, s.ow), (s.kh, s.kw), s.sh)
    return KernelPlan({"threads": s.gemm_threads(options)}, tables=[(layout.key, "direct_offsets", layout.offsets())],
                      scratch_bytes=layout.scratch_bytes())


@C_KERNELS.kernel("conv_direct", *CONV_OPS, accepts=accepts_conv, applies=_direct_applies, plan=_direct_plan)
def emit_conv_direct(em: Emitter, instr: Instr) -> str:
    # The weights are read in place, row-major [M][C*KH*KW]: broadcasting A from K-strided rows
    # measured faster in the tile than from 8-row interleaved blocks.
    s = ConvShape(instr)
    w = s.writer(em).line(s.epilogue().c_init())
    w.line(f"for (long nb = 0; nb < {s.n_batch}; nb++)")
    with w.block(f"for (long gi = 0; gi < {s.groups}; gi++)"):
        w.line(s.geometry("g", f"x + nb * {s.channels * s.height * s.width} + gi * {s.cg * s.height * s.width}"),
               f"long base = nb * {s.out_channels * s.pixels} + gi * {s.mg * s.pixels};")
        w.call("ember_conv_direct", "&g", s.mg, f"{em.pointer(s.w, const=True)} + gi * {s.mg * s.k}", em.table(instr),
               f"bias ? bias + gi * {s.mg} : NULL", "res ? res + base : NULL", "y + base", "&ep", em.scratch(instr),
               param(instr, "threads", 1))
    return w.text()


# conv_gemm -------------------------------------------------------------------------------


# Rows of B read in place that lie a multiple of this many bytes apart map to 1/32 of the L1
# sets (or fewer), and a panel's deep column of them evicts itself from L1 and L2.
ALIASING_STRIDE_BYTES = 2048
# Below this depth a panel's rows fit the sets they share, and copying B costs more than it saves.
ALIASING_MIN_DEPTH = 64


def pointwise_b(pixels: int, k: int) -> str:
    """How conv_gemm reads a 1x1 convolution's input as B: in place ("direct"), or copied into
    panels at run time ("panels") where the map's row stride aliases (32x32 or 48x64 maps:
    4 KB, 12 KB). A 480-channel 1x1 convolution on a 32x32 map ran 2.1x faster copied, on a Xeon
    (Ember's GEMM read its panels from L3); on strides that do not alias (56x56, 28x28, 12x40)
    the copy only costs."""
    aliasing = math.gcd(pixels * 4, 4096) >= ALIASING_STRIDE_BYTES
    return "panels" if aliasing and k >= ALIASING_MIN_DEPTH else "direct"


def _gemm_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = ConvShape(instr)
    threads = s.gemm_threads(options)
    b = pointwise_b(s.pixels, s.k) if s.pointwise else "im2col"
    return KernelPlan({"b": b, "threads": threads}, scratch_bytes=gemm_b_scratch(s.pixels, s.k, threads, b))


@C_KERNELS.kernel("conv_gemm", *CONV_OPS, accepts=accepts_conv, plan=_gemm_plan)
def emit_conv_gemm(em: Emitter, instr: Instr) -> str:
    s = ConvShape(instr)
    direct = param(instr, "b") == "direct"
    call = gemm_call(m=s.mg, n=s.pixels, k=s.k, a=f"{em.pointer(s.w, const=True)} + gi * {s.mg * s.k}",
                     a_layout=(s.k, 1, MR * s.k), c="y + base", scratch=em.scratch(instr),
                     threads=int(param(instr, "threads", 1)), b_direct="xg" if direct else "NULL",
                     packer="NULL" if direct else "ember_pack_im2col", pack_ctx="NULL" if direct else "&pk")
    return grouped_gemm_loops(em, s, direct, call)


def grouped_gemm_loops(em: Emitter, s: ConvShape, direct: bool, call: str) -> str:
    """Per image and group, the GEMM `call` over that group's input (`xg`, read in place when
    `direct`, else through the im2col packer's geometry `pk`) into `y + base`, with the bias,
    residual and activation epilogue: the convolution-as-GEMM loops every GEMM variant shares."""
    epilogue = s.epilogue(bias=f"bias ? bias + gi * {s.mg} : NULL", bias_per_row=True,
                          residual="res ? res + base : NULL", ld_residual=s.pixels)
    w = s.writer(em)
    w.line(f"for (long nb = 0; nb < {s.n_batch}; nb++)")
    with w.block(f"for (long gi = 0; gi < {s.groups}; gi++)"):
        w.line(f"const float *xg = x + nb * {s.channels * s.height * s.width} + gi * {s.cg * s.height * s.width};",
               f"long base = nb * {s.out_channels * s.pixels} + gi * {s.mg * s.pixels};")
        if not direct:
            w.line(s.geometry("pk", "xg"))
        w.line(epilogue.c_init(), call)
    return w.text()


# pooling and arg-reductions --------------------------------------------------------------


def accepts_pool(view: OpView) -> str | None:
    return None if view.operand(0).rank == 4 else "only 2-D (NCHW) pooling has C kernels"


def _pool_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    out, x = instr.required()
    attrs = instr.attrs
    n_batch, channels = x.type.shape[:2]
    oh, ow = out.type.shape[2:]
    (kh, kw) = attrs.kernel
    work = n_batch * channels * oh * ow * kh * kw
    return KernelPlan({"threads": threads_for(options.num_threads, work)})


def _pool_loops(em, instr: Instr, init: str, accumulate: str, finish) -> str:
    out, x = instr.required()
    attrs = instr.attrs
    n_batch, channels, height, width = x.type.shape
    oh, ow = out.type.shape[2:]
    (kh, kw), (sh, sw), (dh, dw) = attrs.kernel, attrs.strides, attrs.dilations
    pt, pl = attrs.pads[0], attrs.pads[1]
    t = c_type(x.type.dtype)
    items = n_batch * channels
    lines = [f"const {t} *x = {em.pointer(x, const=True)};", f"{t} *y = {em.pointer(out)};"]
    if int(param(instr, "threads", 1)) > 1:
        lines.append(f"#pragma omp parallel for {threads_pragma(instr)} schedule(static)")
    lines += [
        f"for (long item = 0; item < {items}; item++)",
        f"for (long i = 0; i < {oh}; i++)",
        f"for (long j = 0; j < {ow}; j++) {{",
        f"    const {t} *xc = x + item * {height * width};",
        f"    {init}",
        "    long count = 0; (void)count;",
        f"    for (long u = 0; u < {kh}; u++) {{",
        f"        long ih = i * {sh} - {pt} + u * {dh};",
        f"        if (ih < 0 || ih >= {height}) continue;",
        f"        for (long v = 0; v < {kw}; v++) {{",
        f"            long iw = j * {sw} - {pl} + v * {dw};",
        f"            if (iw < 0 || iw >= {width}) continue;",
        f"            {t} val = xc[ih * {width} + iw];",
        f"            {accumulate}",
        "        }",
        "    }",
        f"    y[(item * {oh} + i) * {ow} + j] = {finish(out)};",
        "}",
    ]
    return "\n".join(lines)


@C_KERNELS.kernel("maxpool_loops", "MaxPool", accepts=accepts_pool, plan=_pool_plan)
def emit_maxpool(em, instr: Instr) -> str:
    t = instr.operand(1).type.dtype
    nan = "val != val || " if t.is_float else ""
    return _pool_loops(em, instr, f"{c_type(t)} acc = {lowest(t)};", f"if ({nan}val > acc) acc = val;",
                       lambda out: "acc")


@C_KERNELS.kernel("avgpool_loops", "AveragePool", accepts=accepts_pool, plan=_pool_plan)
def emit_avgpool(em, instr: Instr) -> str:
    attrs = instr.attrs
    out = instr.operand(0)
    t = out.type.dtype
    if attrs.count_include_pad:
        # Cells inside input + explicit pads count; ceil-mode overhang beyond the pads does not.
        (kh, kw), (sh, sw), (dh, dw) = attrs.kernel, attrs.strides, attrs.dilations
        height, width = instr.operand(1).type.shape[2:]
        pt, pl, pb, pr = attrs.pads
        counts = (
            f"(double)(({{ long n_ = 0; for (long u = 0; u < {kh}; u++) {{ long ih = i * {sh} - {pt} + u * {dh}; "
            f"if (ih < -{pt} || ih >= {height + pb}) continue; for (long v = 0; v < {kw}; v++) {{ "
            f"long iw = j * {sw} - {pl} + v * {dw}; if (iw >= -{pl} && iw < {width + pr}) n_++; }} }} n_; }}))"
        )
        finish = lambda o: f"({c_type(t)})(acc / {counts})"  # noqa: E731
    else:
        # A window wholly in the padding averages nothing: 0 / 0, NaN (as the reference gives)
        finish = lambda o: f"({c_type(t)})(count ? acc / count : NAN)"  # noqa: E731
    return _pool_loops(em, instr, "double acc = 0.0;", "acc += val; count++;", finish)


@C_KERNELS.kernel("arg_reduce_loops", "ArgMax", "ArgMin")
def emit_arg_reduce(em, instr: Instr) -> str:
    out, x = instr.required()
    attrs = instr.attrs
    shape = x.type.shape
    axis = attrs.axis % len(shape)
    outer = math.prod(shape[:axis])
    n = shape[axis]
    inner = math.prod(shape[axis + 1:])
    t = c_type(x.type.dtype)
    better = ">" if instr.name == "ArgMax" else "<"
    if attrs.select_last_index:
        better += "="
    return "\n".join([
        f"const {t} *x = {em.pointer(x, const=True)};",
        f"int64_t *y = {em.pointer(out)};",
        f"for (long o = 0; o < {outer}; o++) for (long i = 0; i < {inner}; i++) {{",
        f"    const {t} *row = x + o * {n * inner} + i;",
        f"    {t} best = row[0]; int64_t at = 0;",
        f"    for (long j = 1; j < {n}; j++)",
        f"        if (row[j * {inner}] {better} best) {{ best = row[j * {inner}]; at = j; }}",
        f"    y[o * {inner} + i] = at;",
        "}",
    ])
