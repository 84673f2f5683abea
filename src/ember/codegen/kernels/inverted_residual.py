"""The cpu kernel of InvertedResidual (ops/inverted_residual.py): MobileNetV2's expansion,
depthwise and projection in one step, channels last inside it.

NCHW x is transposed into [pixels][C_in] (the library's ember_transpose_f32); the expansion is
a GEMM with the pixels as rows, storing E [pixels][C_e] row-major with its bias and activation
in registers; the depthwise convolution reads E 16 channels at a time, one vector per output
pixel and tap with no lane wasted on narrow rows and no masked edge vectors, into
D [out pixels][C_e]; the projection is a GEMM from D into [out pixels][C_out] with its bias
(and activation when there is no residual), transposed into NCHW y; a residual and the
activation after it come last. The intermediates live in the step's scratch. A block whose x
or y is channels last (assign-layouts' chains) reads NHWC x as the GEMM's rows as they are
and NCHW x transposed in place, and stores y from the projection's tiles in its layout, the
residual added there: no transposed copies.

How the threads share a block shows in `ember dump` as the step's `split`: "pixels" runs two
parallel regions, chunks of input pixels transposed and expanded, then chunks of output
pixels depthwised, projected and stored, each chunk all of its stage's channels; "rows"
(channels-last blocks on several threads, or with an E too big for L2) one region, each
thread a run of output rows from the input rows they read to y, in bands, in a scratch slab
of its own (`_split_rows`); "channels"
(7x7 maps, where the weights outweigh E) splits every stage on its own by channels; "bands"
(large maps with an expanded tensor over BANDS_ABOVE_BYTES) runs channels first instead, in
bands of output rows that keep their expanded rows in L2 (`_emit_bands`)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import numpy as np

from ember.codegen.c_writer import CWriter
from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.depthwise_nhwc import DEPTHWISE_NHWC, DEPTHWISE_NHWC_C, LANES, depthwise_taps
from ember.codegen.kernels.gemm import Epilogue, gemm_call
from ember.codegen.kernels.layouts import (
    MR,
    NR,
    depthwise_kernel,
    depthwise_scratch_bytes,
    pack_panels,
    pad_to_panels,
    threads_for,
)
from ember.codegen.kernels.registry import KernelOptions, KernelPlan, OpView
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Buffer, Instr
from ember.ops.inverted_residual import InvertedResidualAttrs
from ember.ops.layouts import TO_NCHW
from ember.types import DType

# Blocks on input maps over MAX_PIXELS run channels last only up to there: on 56x56 (24 -> 144
# -> 24) that step took 788 us against 652 for three separate steps (the 24-wide projection
# fills 3/4 of a 32-column panel, and the 1.8 MB expanded tensor leaves L2). Where the expanded
# tensor passes BANDS_ABOVE_BYTES, the block runs channels first in bands of output rows
# (`_emit_bands`), each band's expanded and depthwised rows within 3/4 of the core's L2
# (`band_bytes`) of its thread's scratch. Zen 4 (1 MB L2 a core): MobileNetV2's 112x112 block
# (16 -> 96 -> 24, 4.8 MB expanded) 8% faster than three steps at 1 thread, 12% at 2; on
# 56x56 (1.8 MB) bands of 1 MB were no faster than three steps, and 2-4x slower with bands
# under 512 KB (each band's fixed costs and re-expanded rows). Xeon (2 MB L2): the 56x56
# blocks in bands of 1.5 MB made MobileNetV2 2.6% faster at 1 thread and 1.6% at 2 (16
# rounds of `bench/ab_revisions.py`; bands of 1 MB: 2.6% and 0%).
MAX_PIXELS = 28 * 28
BANDS_ABOVE_BYTES = 1 << 20


def runs_channels_last(y_shape: tuple[int, ...]) -> bool:
    """Whether a block with NCHW y of this shape runs faster channels last inside, where x and
    y are NHWC too (the assign-layouts pass asks, via the cpu backend): blocks whose output map
    has at most MAX_PIXELS pixels. MobileNetV2's strided 56x56 -> 28x28 block by rows, NHWC:
    237 against 319 us at 1 thread, 122 against 161 at 2 (channels first in bands); its 56x56
    blocks stay in bands, 10-15% faster there at 2 threads (Xeon)."""
    return len(y_shape) == 4 and y_shape[2] * y_shape[3] <= MAX_PIXELS


def band_bytes(options: KernelOptions) -> int:
    """A band's expanded and depthwised rows at most: 3/4 of the core's L2, at least 512 KB."""
    return max(512 << 10, options.l2_bytes * 3 // 4)


# The "rows" split's per-thread scratch comes in slabs of this size (see _Block.thread_slab_floats).
THREAD_SLAB_BYTES = 1 << 20
# A chunk's fixed cost (its GEMM calls, the depthwise taps reloaded per 16 channels) and how
# late a pool worker starts on a region, both in multiply-adds (about 0.3 us each).
CHUNK_MACS = 16_000
WAKE_MACS = 16_000



def _accepts(view: OpView) -> str | None:
    if view.results[0].dtype is not DType.FLOAT32:
        return "the InvertedResidual kernel runs float32"
    if not all(view.constant[i] for i in (1, 3, 5)) or not all(
            view.operands[i] is None or view.constant[i] for i in (2, 4, 6)):
        return "the InvertedResidual kernel packs its weights and reads its biases at compile time: they must be " \
               "constants"
    if view.operand(1).shape[0] % LANES:
        return f"the InvertedResidual kernel needs a multiple of {LANES} expanded channels"
    x = view.operand(0)
    if x.rank != 4:
        return "the InvertedResidual kernel takes NCHW or NHWC images"
    if view.attrs.x_channels_last or view.attrs.y_channels_last:
        return None
    expanded_bytes = x.shape[2] * x.shape[3] * view.operand(1).shape[0] * 4
    if x.shape[2] * x.shape[3] > MAX_PIXELS and expanded_bytes <= BANDS_ABOVE_BYTES:
        return (f"input maps over {MAX_PIXELS} pixels whose expanded tensor is at most {BANDS_ABOVE_BYTES} bytes run "
                "as three convolution steps (measured faster)")
    return None


class _Block:
    """The geometry of one InvertedResidual instruction."""

    def __init__(self, instr: Instr) -> None:
        base = instr.base_operands
        self.out, self.x, self.w_expand = instr.operand(0), instr.operand(1), instr.operand(2)
        self.w_depthwise, self.w_project = instr.operand(4), instr.operand(6)
        self.b_expand, self.b_depthwise, self.b_project = base[3], base[5], base[7]
        self.residual = base[8] if len(base) > 8 else None
        self.attrs: InvertedResidualAttrs = instr.attrs
        self.x_nhwc, self.y_nhwc = self.attrs.x_channels_last, self.attrs.y_channels_last
        # Either end NHWC: the block runs channels last, reading and writing each end in its layout.
        self.channels_last = self.x_nhwc or self.y_nhwc
        x_shape, out_shape = self.x.type.shape, self.out.type.shape
        if self.x_nhwc:  # NHWC: the same dims read in NCHW order
            x_shape = tuple(x_shape[i] for i in TO_NCHW)
        if self.y_nhwc:
            out_shape = tuple(out_shape[i] for i in TO_NCHW)
        self.n_batch, self.c_in, self.h, self.w = (int(d) for d in x_shape)
        self.expanded = int(self.w_expand.type.shape[0])
        self.kh, self.kw = (int(d) for d in self.w_depthwise.type.shape[2:])
        self.c_out, self.oh, self.ow = (int(d) for d in out_shape[1:])
        self.pixels, self.out_pixels = self.h * self.w, self.oh * self.ow

    def x_rows(self, first: str) -> tuple[str, tuple[int, int, int]]:
        """x from input pixel `first` on as the expansion GEMM's A: a pointer and its layout
        (row stride, k stride, 8-row block stride); NCHW x is read transposed in place."""
        if self.x_nhwc:
            return f"xn + ({first}) * {self.c_in}", (self.c_in, 1, MR * self.c_in)
        return f"xn + ({first})", (1, self.pixels, MR)

    def y_rows(self, first: str) -> tuple[str, int]:
        """y from output pixel `first` on as the projection GEMM's C: a pointer and its leading
        dimension (NCHW y is stored transposed: the epilogue's `transposed`)."""
        if self.y_nhwc:
            return f"yn + ({first}) * {self.c_out}", self.c_out
        return f"yn + ({first})", self.out_pixels

    def residual_rows(self, first: str) -> str:
        return f"rn + ({first}) * {self.c_out}" if self.y_nhwc else f"rn + ({first})"

    @property
    def expanded_padded(self) -> int:
        """E's row length: whole 32-column panels, so that every GEMM tile stores from registers."""
        return -(-self.expanded // NR) * NR

    @property
    def out_padded(self) -> int:
        return -(-self.c_out // NR) * NR

    def scratch_floats(self) -> int:
        """E and D, and for NCHW x and y their channels-last copies (x transposed, y before its
        transpose)."""
        inside = self.pixels * self.expanded_padded + self.out_pixels * self.expanded
        return inside if self.channels_last else inside + self.pixels * self.c_in + self.out_pixels * self.out_padded

    def macs(self) -> int:
        return self.pixels * self.input_pixel_macs + self.out_pixels * self.output_pixel_macs

    @property
    def input_pixel_macs(self) -> int:
        return self.c_in * self.expanded

    @property
    def output_pixel_macs(self) -> int:
        return self.expanded * (self.kh * self.kw + self.c_out)

    def band_input_rows(self, i0: int, i1: int) -> tuple[int, int]:
        """The input rows output rows [i0, i1) read: their taps' rows, clipped to the map."""
        stride, pad = self.attrs.strides[0], self.attrs.pads[0]
        return max(0, i0 * stride - pad), min(self.h, (i1 - 1) * stride - pad + self.kh)

    def rows_band_floats(self, rows: int) -> int:
        """Under the "rows" split, a band of `rows` output rows: E of the input rows they read
        (whole panels wide) and D."""
        in_rows = min(self.h, (rows - 1) * self.attrs.strides[0] + self.kh)
        return in_rows * self.w * self.expanded_padded + rows * self.ow * self.expanded

    def rows_band(self, threads: int, band_bytes: int) -> int:
        """Output rows per band under the "rows" split: a thread's whole run where its E and D
        fit `band_bytes`, else the most rows that do (at least one)."""
        most = max(i1 - i0 for i0, i1 in _thread_rows(self, threads))
        fitting = [r for r in range(1, most + 1) if self.rows_band_floats(r) * 4 <= band_bytes]
        return max(fitting, default=1)

    def thread_slab_floats(self, band_rows: int, band_bytes: int) -> int:
        """Each thread's band scratch: whole THREAD_SLAB_BYTES, at least `band_bytes` (what
        every block's bands fit, as `rows_band` chooses them), so that thread t's slab starts
        at the same offset in every block's scratch and it writes lines its own core wrote
        last."""
        slab = THREAD_SLAB_BYTES // 4
        return -(-max(self.rows_band_floats(band_rows), band_bytes // 4) // slab) * slab

    def band_floats(self, rows: int) -> int:
        """A band's scratch: its expanded input rows, its depthwised rows, one GEMM panel (the
        partial last one, packed) and the depthwise kernel's own (for the largest band)."""
        in_rows = (rows - 1) * self.attrs.strides[0] + self.kh
        sizes = {min(rows, self.oh), self.oh % rows or rows}
        strides = (self.attrs.strides[0], self.attrs.strides[1])
        depthwise = max(depthwise_scratch_bytes((r, self.ow), (self.kh, self.kw), strides)
                        for r in sizes) // 4
        return (self.expanded * (in_rows * self.w + rows * self.ow) + max(self.c_in, self.expanded) * NR
                + depthwise)

    def band_rows(self, threads: int, band_bytes: int) -> int:
        """Output rows per band: the earliest finish of the threads' runs of bands (`_finish`; a
        band's multiply-adds count the input rows it expands again for its neighbour), among
        bands whose expanded and depthwised rows fit `band_bytes`."""
        stride = self.attrs.strides[0]
        fitting = [r for r in range(1, self.oh + 1)
                   if self.expanded * (((r - 1) * stride + self.kh) * self.w + r * self.ow) * 4 <= band_bytes] or [1]

        def band_macs(i0: int, i1: int) -> int:
            r0, r1 = self.band_input_rows(i0, i1)
            return (r1 - r0) * self.w * self.input_pixel_macs + (i1 - i0) * self.ow * self.output_pixel_macs

        def finish(rows: int) -> int:
            return _finish([band_macs(i0, min(self.oh, i0 + rows)) for i0 in range(0, self.oh, rows)], threads)

        return min(fitting, key=lambda rows: (finish(rows), -rows))


def _plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = _Block(instr)
    threads = threads_for(options.num_threads, s.macs())
    band = band_bytes(options)
    # Bands (channels first) take the weights as stored: row-major GEMM operands, depthwise taps per channel.
    if s.pixels > MAX_PIXELS and not s.channels_last:
        rows = s.band_rows(threads, band)
        return KernelPlan({"threads": threads, "split": "bands", "band_rows": rows},
                          scratch_bytes=threads * s.band_floats(rows) * 4)
    expand = pack_panels(s.w_expand.constant().reshape(s.expanded, s.c_in).T.astype(np.float32))
    taps = depthwise_taps(s.w_depthwise.constant())
    project = pack_panels(s.w_project.constant().reshape(s.c_out, s.expanded).T.astype(np.float32))
    packed = [(s.w_expand, "expand_panels32", expand), (s.w_depthwise, "depthwise_taps", taps),
              (s.w_project, "project_panels32", project)]
    # The GEMMs' biases padded to whole panels (their tiles read 32 columns of bias).
    for bias, layout in ((s.b_expand, "expand_bias32"), (s.b_project, "project_bias32")):
        if bias is not None:
            packed.append((bias, layout, pad_to_panels(bias.constant())))
    split = _split(s, threads, band=band)
    if split == "rows":
        rows = s.rows_band(threads, band)
        slab = s.thread_slab_floats(rows, band)
        return KernelPlan({"threads": threads, "split": split, "band_rows": rows, "slab_floats": slab}, packed=packed,
                          scratch_bytes=threads * slab * 4)
    return KernelPlan({"threads": threads, "split": split}, packed=packed, scratch_bytes=s.scratch_floats() * 4)


def _split(s: _Block, threads: int, *, band: int) -> str:
    """How the threads share a block: by pixels (two parallel regions: each thread expands its
    input pixels, then depthwises, projects and stores its output pixels), or by rows where x
    and y are channels last (one region; MobileNetV2 6% faster on 2 threads than with the
    pixel split: `_split_rows` says why), unless the 1x1 weights outweigh the expanded
    tensor, as on 7x7 maps (160 -> 960 -> 320: 1.8 MB of weights, 188 KB of E), where each
    thread reading all of them cost more than the three extra regions of splitting every
    stage by channels. On one thread, channels-last blocks whose E and D pass `band` bytes
    run by rows too, in bands."""
    if threads > 1 and s.expanded * (s.c_in + s.c_out) > s.pixels * s.expanded:
        return "channels"
    if s.channels_last and s.oh >= threads and (threads > 1 or s.rows_band_floats(s.oh) * 4 > band):
        return "rows"
    return "pixels"


def _thread_rows(s: _Block, threads: int) -> list[tuple[int, int]]:
    """Each thread's output rows under the "rows" split: contiguous, as even as they go."""
    return [(t * s.oh // threads, (t + 1) * s.oh // threads) for t in range(threads)]


def _const_pointer(em: Emitter, buffer: Buffer | None) -> str:
    return em.pointer(buffer, const=True) if buffer is not None else "NULL"


def _epilogue(bias: str, activation: str, alpha: float, beta: float) -> Epilogue:
    return Epilogue(bias=bias, activation=activation, alpha=alpha, beta=beta)


@C_KERNELS.kernel("inverted_residual", "InvertedResidual", accepts=_accepts, plan=_plan)
def emit_inverted_residual(em: Emitter, instr: Instr) -> str:
    s, a = _Block(instr), instr.attrs
    threads = int(param(instr, "threads", 1))
    if param(instr, "split", "pixels") == "bands":
        return _emit_bands(em, instr, s, threads)
    em.define(DEPTHWISE_NHWC, DEPTHWISE_NHWC_C)

    def pointer(buffer: Buffer | None) -> str:
        return _const_pointer(em, buffer)

    w = CWriter().line(f"const float *x = {pointer(s.x)};", f"float *y = {em.pointer(s.out)};",
                       f"const float *res = {pointer(s.residual)};", "(void)res;")
    # NCHW y gets the residual and the activation after its transpose; NHWC y in the GEMM's tile.
    last = "none" if s.residual is not None and not s.channels_last else a.project_activation
    biases = iter(range(3, 5))  # the padded biases follow the three packed weights, when present
    b_expand = em.packed(instr, next(biases)) if s.b_expand is not None else "NULL"
    b_project = em.packed(instr, next(biases)) if s.b_project is not None else "NULL"
    ce, ce_padded, pixels, out_pixels = s.expanded, s.expanded_padded, s.pixels, s.out_pixels

    def depthwise(c_lo: str, c_hi: str, q0: str, q1: str, rows: str = str(s.h), pad_top: str = str(a.pads[0])) -> str:
        """E's `rows` input rows (the map's, or a band's with its own top padding) into D."""
        return (f"{DEPTHWISE_NHWC}(e, {ce_padded}, {rows}, {s.w}, {ce}, {em.packed(instr, 1)}, "
                f"{pointer(s.b_depthwise)}, d, {s.ow}, {s.kh}, {s.kw}, {a.strides[0]}, {a.strides[1]}, {pad_top}, "
                f"{a.pads[1]}, &ep_depthwise, "
                f"{c_lo}, {c_hi}, {q0}, {q1});")

    with w.block(f"for (long nb = 0; nb < {s.n_batch}; nb++)"):
        split = param(instr, "split", "pixels")
        if s.channels_last and split != "rows":  # x and y are the GEMMs' operands as they are (rows: per thread)
            w.line(f"float *e = {em.scratch(instr)}, *d = e + {pixels * ce_padded};")
        elif not s.channels_last:
            w.line(f"float *xt = {em.scratch(instr)}, *e = xt + {pixels * s.c_in}, *d = e + {pixels * ce_padded}, "
                   f"*t = d + {out_pixels * ce};")
        w.line(f"float *yn = y + nb * {s.c_out * out_pixels};", f"const float *xn = x + nb * {s.c_in * pixels};")
        if s.residual is not None:
            w.line(f"const float *rn = res + nb * {s.c_out * out_pixels};")
        project = Epilogue(bias=b_project, activation=last, alpha=a.project_alpha, beta=a.project_beta)
        if s.channels_last:  # y (and the residual) in its layout, straight from the tile
            project = replace(project, transposed=not s.y_nhwc)
            if s.residual is not None:
                project = replace(project, residual="rn", ld_residual=s.y_rows("0")[1])
        w.line(_epilogue(b_expand, a.expand_activation, a.expand_alpha, a.expand_beta).c_init("ep_expand"),
               _epilogue("NULL", a.depthwise_activation, a.depthwise_alpha, a.depthwise_beta).c_init("ep_depthwise"),
               project.c_init("ep_project"))
        if s.residual is not None and not s.channels_last:
            w.line(_epilogue("NULL", a.project_activation, a.project_alpha, a.project_beta).c_init("ep_finish"))
        if split == "channels":
            _split_channels(w, s, threads, em.packed(instr, 0), em.packed(instr, 2), depthwise)
        elif split == "rows":
            _split_rows(w, s, threads, int(param(instr, "band_rows", s.oh)), int(param(instr, "slab_floats", 0)),
                        em.packed(instr, 0), em.packed(instr, 2), em.scratch(instr), depthwise)
        else:
            _split_pixels(w, s, threads, em.packed(instr, 0), em.packed(instr, 2), depthwise)
    return w.text()


def _emit_bands(em: Emitter, instr: Instr, s: _Block, threads: int) -> str:
    """A large map, channels first and one parallel region: bands of output rows taken by the
    threads as they free up, each band in its thread's scratch. A band expands the input rows
    it reads (x read in place as the GEMM's B, the weights as stored as its A), depthwises
    them with the library's ember_depthwise (the band's rows as a map of their own, its top
    padding where the map's is) and projects straight into y's rows, bias, residual and
    activation in the GEMM's epilogue: no transposes, no padded channels, and the expanded
    rows stay in L2."""
    a = s.attrs
    rows, stride, pad = int(param(instr, "band_rows", 1)), a.strides[0], a.pads[0]
    in_rows, pixels, out_pixels, ce = (rows - 1) * stride + s.kh, s.pixels, s.out_pixels, s.expanded

    def pointer(buffer: Buffer | None) -> str:
        return _const_pointer(em, buffer)

    w = CWriter().line(f"const float *x = {pointer(s.x)};", f"float *y = {em.pointer(s.out)};",
                       f"const float *res = {pointer(s.residual)};", "(void)res;",
                       f"float *scratch = {em.scratch(instr)};")
    w.line(Epilogue(bias=pointer(s.b_expand), bias_per_row=True, activation=a.expand_activation,
                    alpha=a.expand_alpha, beta=a.expand_beta).c_init("ep_expand"),
           _epilogue("NULL", a.depthwise_activation, a.depthwise_alpha, a.depthwise_beta).c_init("ep_depthwise"))
    with w.block(f"for (long nb = 0; nb < {s.n_batch}; nb++)"):
        w.line(f"const float *xn = x + nb * {s.c_in * pixels};", f"float *yn = y + nb * {s.c_out * out_pixels};",
               f"const float *rn = res ? res + nb * {s.c_out * out_pixels} : NULL;", "(void)rn;")
        with _chunks(w, s.oh, rows, threads, "i0", "i1"):
            w.line(f"long r0 = i0 * {stride} - {pad} > 0 ? i0 * {stride} - {pad} : 0;",
                   f"long r1 = (i1 - 1) * {stride} - {pad} + {s.kh};",
                   f"if (r1 > {s.h}) r1 = {s.h};",
                   f"long np = (r1 - r0) * {s.w}, nq = (i1 - i0) * {s.ow};",
                   f"float *e = scratch + (long)ember_thread_num() * {s.band_floats(rows)}, "
                   f"*d = e + {ce * in_rows * s.w}, *panel = d + {ce * rows * s.ow}, "
                   f"*dw_scratch = panel + {max(s.c_in, ce) * NR};",
                   gemm_call(m=ce, n="np", k=s.c_in, a=pointer(s.w_expand), a_layout=(s.c_in, 1, MR * s.c_in),
                             b_direct=f"xn + r0 * {s.w}", ldb=pixels, c="e", ldc="np", epilogue="&ep_expand",
                             scratch="panel"),
                   # The band's rows as a map: its top padding is the map's where it starts at row 0.
                   f"ember_conv_geom g = {{ .x = e, .C = {ce}, .H = r1 - r0, .W = {s.w}, .KH = {s.kh}, "
                   f".KW = {s.kw}, .SH = {stride}, .SW = {a.strides[1]}, .PH = r0 - (i0 * {stride} - {pad}), "
                   f".PW = {a.pads[1]}, .DH = 1, .DW = 1, .OH = i1 - i0, .OW = {s.ow} }};",
                   f"ember_depthwise(&g, {depthwise_kernel((s.kh, s.kw), (stride, a.strides[1]))}, "
                   f"{pointer(s.w_depthwise)}, {pointer(s.b_depthwise)}, NULL, d, "
                   f"&ep_depthwise, dw_scratch, 1);",
                   Epilogue(bias=pointer(s.b_project), bias_per_row=True,
                            residual=f"rn ? rn + i0 * {s.ow} : NULL", ld_residual=out_pixels,
                            activation=a.project_activation, alpha=a.project_alpha,
                            beta=a.project_beta).c_init("ep_project"),
                   gemm_call(m=s.c_out, n="nq", k=ce, a=pointer(s.w_project), a_layout=(ce, 1, MR * ce),
                             b_direct="d", ldb="nq", c=f"yn + i0 * {s.ow}", ldc=out_pixels,
                             epilogue="&ep_project", scratch="panel"))
    return w.text()


def _split_pixels(w: CWriter, s: _Block, threads: int, expand_panels: str, project_panels: str,
                  depthwise: Callable[..., str]) -> None:
    """Two parallel regions and no barrier inside either (the pool has none: backends/cpu/
    ember_pool.c): the first transposes and expands chunks of input pixels into E; the second,
    once all of E is there, depthwises, projects and stores chunks of output pixels."""
    ce, ce_padded, co_padded, pixels, out_pixels = s.expanded, s.expanded_padded, s.out_padded, s.pixels, s.out_pixels
    with _chunks(w, pixels, _chunk(pixels, s.c_in * ce, threads), threads, "p0", "p1"):
        if s.channels_last:
            x_rows, x_layout = s.x_rows("p0")
        else:
            w.line(f"ember_transpose_f32(xn + p0, {s.c_in}, p1 - p0, {pixels}, xt + p0 * {s.c_in}, {s.c_in});")
            x_rows, x_layout = f"xt + p0 * {s.c_in}", (s.c_in, 1, MR * s.c_in)
        w.line(gemm_call(m="p1 - p0", n=ce_padded, k=s.c_in, a=x_rows, a_layout=x_layout, b_packed=expand_panels,
                         ldb=0, c=f"e + p0 * {ce_padded}", ldc=ce_padded, epilogue="&ep_expand"))
    with _chunks(w, out_pixels, _chunk(out_pixels, ce * (s.kh * s.kw + s.c_out), threads), threads, "q0", "q1"):
        w.line(depthwise("0", str(ce), "q0", "q1"))
        if s.channels_last:  # straight into y, the residual added in the tile
            w.line("ember_epilogue ep_rows = ep_project;")
            if s.residual is not None:
                w.line(f"ep_rows.residual = {s.residual_rows('q0')};")
            y_rows, ldc = s.y_rows("q0")
            w.line(gemm_call(m="q1 - q0", n=s.c_out, k=ce, a=f"d + q0 * {ce}", a_layout=(ce, 1, MR * ce),
                             b_packed=project_panels, ldb=0, c=y_rows, ldc=ldc, epilogue="&ep_rows"))
            return
        w.line(gemm_call(m="q1 - q0", n=co_padded, k=ce, a=f"d + q0 * {ce}", a_layout=(ce, 1, MR * ce),
                         b_packed=project_panels, ldb=0, c=f"t + q0 * {co_padded}", ldc=co_padded,
                         epilogue="&ep_project"),
               f"ember_transpose_f32(t + q0 * {co_padded}, q1 - q0, {s.c_out}, {co_padded}, yn + q0, {out_pixels});")
        if s.residual is not None:
            w.line(f"for (long c = 0; c < {s.c_out}; c++) ember_finish_span(yn + c * {out_pixels} + q0, "
                   f"rn + c * {out_pixels} + q0, q1 - q0, &ep_finish);")


def _split_rows(w: CWriter, s: _Block, threads: int, band_rows: int, slab: int, expand_panels: str,
                project_panels: str, scratch: str, depthwise: Callable[..., str]) -> None:
    """Channels last, one parallel region: thread t takes the t-th run of output rows, in
    bands of `band_rows` (all of them where their E and D fit 3/4 of the core's L2); for each
    band it expands the input rows they read (rows a neighbouring band also reads expanded
    again) into its own slab, depthwises them as a map of their own and projects into y's
    rows (x and y each in its layout: `_Block.x_rows`, `_Block.y_rows`). Nothing a thread
    writes was written by the other core in the previous block: its slab is at the same
    offset in every block, and its rows of x are the ones it wrote as the previous block's y
    (on 2 threads, the pixel split's shared E moved half of each block's scratch across cores
    where consecutive blocks split it at different bytes)."""
    ce, ce_padded, stride, pad = s.expanded, s.expanded_padded, s.attrs.strides[0], s.attrs.pads[0]
    rows = ", ".join(f"{{{i0}, {i1}}}" for i0, i1 in _thread_rows(s, threads))
    x_rows, x_layout = s.x_rows(f"r0 * {s.w}")
    w.line(f"static const long thread_rows[{threads}][2] = {{{rows}}};")
    if threads > 1:
        w.line(f"#pragma omp parallel for num_threads({threads}) schedule(static)")
    with w.block(f"for (long task = 0; task < {threads}; task++)"):
        w.line(f"float *e = {scratch} + task * {slab};")
        with w.block("for (long i0 = thread_rows[task][0], i1; i0 < thread_rows[task][1]; i0 = i1)"):
            w.line(f"i1 = i0 + {band_rows} < thread_rows[task][1] ? i0 + {band_rows} : thread_rows[task][1];",
                   f"long r0 = i0 * {stride} - {pad} > 0 ? i0 * {stride} - {pad} : 0;",
                   f"long r1 = (i1 - 1) * {stride} - {pad} + {s.kh};",
                   f"if (r1 > {s.h}) r1 = {s.h};",
                   f"float *d = e + (r1 - r0) * {s.w * ce_padded};",
                   gemm_call(m=f"(r1 - r0) * {s.w}", n=ce_padded, k=s.c_in, a=x_rows, a_layout=x_layout,
                             b_packed=expand_panels, ldb=0, c="e", ldc=ce_padded, epilogue="&ep_expand"),
                   # The band's rows as a map of their own: its top padding is the map's where it starts at row 0.
                   depthwise("0", str(ce), "0", f"(i1 - i0) * {s.ow}", rows="r1 - r0",
                             pad_top=f"r0 - (i0 * {stride} - {pad})"),
                   "ember_epilogue ep_rows = ep_project;")
            if s.residual is not None:
                w.line(f"ep_rows.residual = {s.residual_rows(f'i0 * {s.ow}')};")
            y_rows, ldc = s.y_rows(f"i0 * {s.ow}")
            w.line(gemm_call(m=f"(i1 - i0) * {s.ow}", n=s.c_out, k=ce, a="d", a_layout=(ce, 1, MR * ce),
                             b_packed=project_panels, ldb=0, c=y_rows, ldc=ldc, epilogue="&ep_rows"))


def _split_channels(w: CWriter, s: _Block, threads: int, expand_panels: str, project_panels: str,
                    depthwise: Callable[..., str]) -> None:
    """Each stage across the threads on its own (the GEMMs by column panels and row blocks, the
    depthwise by 16 channels): every thread reads a share of the weights, not all of them."""
    ce, ce_padded, co_padded, pixels, out_pixels = s.expanded, s.expanded_padded, s.out_padded, s.pixels, s.out_pixels
    if s.channels_last:
        x_rows, x_layout = s.x_rows("0")
    else:
        w.line(f"ember_transpose_f32_threads(xn, {s.c_in}, {pixels}, {pixels}, xt, {s.c_in}, {threads});")
        x_rows, x_layout = "xt", (s.c_in, 1, MR * s.c_in)
    w.line(gemm_call(m=pixels, n=ce_padded, k=s.c_in, a=x_rows, a_layout=x_layout, b_packed=expand_panels, ldb=0,
                     c="e", ldc=ce_padded, epilogue="&ep_expand", threads=threads))
    with _chunks(w, ce, LANES, threads, "c0", "c1"):
        w.line(depthwise("c0", "c1", "0", str(out_pixels)))
    if s.channels_last:
        y_rows, ldc = s.y_rows("0")
        w.line(gemm_call(m=out_pixels, n=s.c_out, k=ce, a="d", a_layout=(ce, 1, MR * ce), b_packed=project_panels,
                         ldb=0, c=y_rows, ldc=ldc, epilogue="&ep_project", threads=threads))
        return
    w.line(gemm_call(m=out_pixels, n=co_padded, k=ce, a="d", a_layout=(ce, 1, MR * ce), b_packed=project_panels,
                     ldb=0, c="t", ldc=co_padded, epilogue="&ep_project", threads=threads),
           f"ember_transpose_f32_threads(t, {out_pixels}, {s.c_out}, {co_padded}, yn, {out_pixels}, {threads});")
    if s.residual is not None:
        w.line(f"ember_finish_span_threads(yn, rn, {s.c_out * out_pixels}, &ep_finish, {threads});")


def _chunk(pixels: int, pixel_macs: int, threads: int) -> int:
    """Pixels per chunk, chosen for the earliest finish of the threads' runs of chunks
    (`_finish`). Multiples of 8 pixels keep the GEMMs' row tiles whole. On a 7x7 map 8-pixel
    chunks split 49 pixels 25/24 where 16-pixel ones split them 32/17 (the blocks ran 1.5x
    faster on 2 threads than on 1 instead of 1.8x)."""
    if threads == 1:
        return pixels

    def finish(chunk: int) -> int:
        return _finish([min(chunk, pixels - start) * pixel_macs for start in range(0, pixels, chunk)], threads)

    candidates = range(MR, max(MR, -(-pixels // threads)) + MR, MR)
    return min(candidates, key=lambda chunk: (finish(chunk), -chunk))


def _finish(work: list[int], threads: int) -> int:
    """When the last of `threads` finishes pieces of `work` (multiply-adds each), thread t
    taking the t-th contiguous run of them as OpenMP's static schedule deals them (the first
    len(work) % threads runs one piece longer): a piece costs CHUNK_MACS more, and the workers
    start WAKE_MACS after the caller."""
    base, extra = divmod(len(work), threads)
    loads, start = [], 0
    for t in range(threads):
        run = work[start:start + base + (t < extra)]
        start += len(run)
        loads.append((WAKE_MACS if t else 0) + sum(run) + CHUNK_MACS * len(run))
    return max(loads)


@contextmanager
def _chunks(w: CWriter, pixels: int, chunk: int, threads: int, lo: str, hi: str) -> Iterator[None]:
    """A loop over [0, pixels) in chunks `lo`..`hi`, split between the threads (threads > 1) in
    contiguous runs, the same thread's every call (the pool runs task t on thread t where it
    can): the pixels a thread expands in one region are then mostly the ones it depthwises in
    the next, and the next step reads the output where the same thread wrote it. Chunks taken
    as threads freed up ran MobileNetV2 5% slower on 2 threads (Xeon: 3.37 against 3.25 ms).
    The chunk count is a variable: with constant bounds GCC would call the combined
    parallel-loop entry point, which Ember's pool does not provide."""
    with w.block():
        w.line(f"long chunks = {-(-pixels // chunk)};")
        if threads > 1:
            w.line(f"#pragma omp parallel for num_threads({threads}) schedule(static)")
        with w.block("for (long k = 0; k < chunks; k++)"):
            w.line(f"long {lo} = k * {chunk}, {hi} = {lo} + {chunk} < {pixels} ? {lo} + {chunk} : {pixels};")
            yield
