"""Transposed convolution: ConvTranspose (GEMM + col2im, fused bias) and Col2Im.

ConvTranspose of x [N, C, *in] with w [C, M/g, *k], any number of spatial axes, runs per
image and group as
  cols[(m, taps), in positions] = W_g^T [(m, taps), C/g] * x_g [C/g, in positions]
on the GEMM core: A is the weights, transposed at compile time into row-major W_g^T when
constant (broadcasting A along K-contiguous rows measured faster in the tile than 8-row
interleaved blocks, as conv_direct found), read in place along K-strided rows when they
arrive at run time; B is the input read in place. Then col2im: every output channel's plane
starts at its bias and each column adds into the output positions it lands on
(o = i * stride - pad_begin + tap * dilation, skipped outside the output). Pads may be
negative (ONNX's output_padding and output_shape extend the output at its end: those
positions get the bias alone). The columns of very large images are made and summed a chunk
of input positions at a time (COLS_CHUNK_BYTES). A 1x1 kernel with stride 1 and no cropping
is the GEMM alone, its bias in the tile epilogue. The fusion passes give ConvTranspose no
activation epilogue, so it has none.

Col2Im is the same col2im over its input [N, C * prod(block), L], any element type."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ember.codegen.c_types import c_type
from ember.codegen.c_writer import CWriter
from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.gemm import Epilogue, gemm_b_scratch, gemm_call
from ember.codegen.kernels.layouts import MR, NR, threads_for
from ember.codegen.kernels.registry import (
    KernelOptions,
    KernelPlan,
    OpView,
    contiguous_strides,
    is_whole_weight,
)
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.types import DType

_ALIGN_FLOATS = 16  # the GEMM's B scratch starts on a 64-byte line after the columns
# ConvTranspose computes its columns a chunk of input positions at a time where all of them
# would take more than this (large images: a 1x64x224x224 input, k4, 32 outputs has 100 MB of
# columns). Smaller chunks measured slower (1.6 MB of columns: 10% at 256 KiB chunks).
COLS_CHUNK_BYTES = 4 << 20


@dataclass(frozen=True)
class Col2Im:
    """Columns [channels * prod(kernel), positions] summed into an image [channels, *out_dims]:
    column (m, taps) at input position i adds into output position
    i * stride - begin + tap * dilation where that lies inside the output."""

    channels: int
    in_dims: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    begins: tuple[int, ...]
    dilations: tuple[int, ...]
    out_dims: tuple[int, ...]

    @property
    def positions(self) -> int:
        return math.prod(self.in_dims)

    def emit(self, w: CWriter, *, t: str, src: str, dst: str, threads: int, init: str | None,
             chunk: tuple[str, str, str] | None = None) -> None:
        """The loops, parallel over channels. init: the value each output plane starts at (a C
        expression of the channel m; None: dst already holds the partial sums). chunk:
        (first, end, width) C expressions when src holds only positions [first, end) of the
        columns, each `width` long.

        With stride 2 and no dilation along the last axis, taps come in pairs (v, v + 1) that
        land on neighbouring outputs: their two columns interleave into one contiguous run,
        which vectorizes where single strided adds do not."""
        n = len(self.in_dims)
        last = n - 1
        out_volume = math.prod(self.out_dims)
        if threads > 1:
            w.line(f"#pragma omp parallel for num_threads({threads}) schedule(static)")
        with w.block(f"for (long m = 0; m < {self.channels}; m++)"):
            w.line(f"{t} *restrict ym = {dst} + m * {out_volume};")
            if init is not None:
                w.line(f"{t} b0 = {init};", f"for (long q = 0; q < {out_volume}; q++) ym[q] = b0;")
            if self.positions == 0 or out_volume == 0:
                return
            ld = chunk[2] if chunk else str(self.positions)
            w.line(f"const {t} *restrict cm = {src} + m * {math.prod(self.kernel)} * {ld};")
            for axis in range(last):
                w.line(f"for (long t{axis} = 0; t{axis} < {self.kernel[axis]}; t{axis}++)")
            with w.block():
                k = self.kernel[last]
                if self.strides[last] == 2 and self.dilations[last] == 1 and k >= 2:
                    with w.block(f"for (long t{last} = 0; t{last} < {k - k % 2}; t{last} += 2)"):
                        self._taps(w, t, chunk, pair=True)
                    if k % 2:
                        with w.block():
                            w.line(f"long t{last} = {k - 1};")
                            self._taps(w, t, chunk, pair=False)
                else:
                    with w.block(f"for (long t{last} = 0; t{last} < {k}; t{last}++)"):
                        self._taps(w, t, chunk, pair=False)

    def _taps(self, w: CWriter, t: str, chunk: tuple[str, str, str] | None, pair: bool) -> None:
        """Tap (t0, ..., t_last), and with pair its neighbour t_last + 1, over every row."""
        n = len(self.in_dims)
        last = n - 1
        width, sw = self.in_dims[last], self.strides[last]
        q0, q1, ld = chunk or ("0", str(self.positions), str(self.positions))
        tap = " + ".join(f"t{a} * {s}" for a, s in enumerate(contiguous_strides(self.kernel)))
        w.line(f"const {t} *restrict c0 = cm + ({tap}) * {ld};")
        # Along the last axis output o = i * sw + off: i in [lo, hi) lands inside.
        for j in range(2 if pair else 1):
            off = f"(t{last} * {self.dilations[last]} - {self.begins[last]} + {j})"
            top = self.out_dims[last] - 1
            w.line(f"long lo{j} = {off} < 0 ? (-{off} + {sw - 1}) / {sw} : 0;",
                   f"long hi{j} = {top} - {off} < 0 ? 0 : ({top} - {off}) / {sw} + 1;",
                   f"if (hi{j} > {width}) hi{j} = {width};")
        w.line(f"long off = t{last} * {self.dilations[last]} - {self.begins[last]};")
        if pair:
            w.line(f"const {t} *restrict c1 = c0 + {ld};")
        # Rows r: the input positions [r * width, (r + 1) * width) of the chunk.
        with w.block(f"for (long r = ({q0}) / {width}; r * {width} < ({q1}); r++)"):
            outer = contiguous_strides(self.in_dims[:last])
            out_strides = contiguous_strides(self.out_dims)
            row = []
            for axis in range(last):
                w.line(f"long o{axis} = (r / {outer[axis]}) % {self.in_dims[axis]} * {self.strides[axis]} - "
                       f"{self.begins[axis]} + t{axis} * {self.dilations[axis]};",
                       f"if (o{axis} < 0 || o{axis} >= {self.out_dims[axis]}) continue;")
                row.append(f"o{axis} * {out_strides[axis]}")
            w.line(f"long base = r * {width} - ({q0}), at = {' + '.join(row) or '0'}, end = ({q1}) - ({q0}) - base;",
                   "long o = at + off;")
            for j in range(2 if pair else 1):
                w.line(f"long l{j} = lo{j} > -base ? lo{j} : -base, h{j} = hi{j} < end ? hi{j} : end;")
            if not pair:
                w.line(f"for (long i = l0; i < h0; i++) ym[o + i * {sw}] += c0[base + i];")
                return
            # Both taps on [lb, hb); each alone on the rest of its own range.
            w.line("long lb = l0 > l1 ? l0 : l1, hb = h0 < h1 ? h0 : h1;",
                   "if (hb < lb) hb = lb;",
                   "for (long i = l0; i < (h0 < lb ? h0 : lb); i++) ym[o + 2 * i] += c0[base + i];",
                   "for (long i = (l0 > hb ? l0 : hb); i < h0; i++) ym[o + 2 * i] += c0[base + i];",
                   "for (long i = l1; i < (h1 < lb ? h1 : lb); i++) ym[o + 2 * i + 1] += c1[base + i];",
                   "for (long i = (l1 > hb ? l1 : hb); i < h1; i++) ym[o + 2 * i + 1] += c1[base + i];",
                   "for (long i = lb; i < hb; i++) {",
                   "    ym[o + 2 * i] += c0[base + i];",
                   "    ym[o + 2 * i + 1] += c1[base + i];",
                   "}")


# ConvTranspose ---------------------------------------------------------------------------


def accepts_conv_transpose(view: OpView) -> str | None:
    if view.results[0].dtype is not DType.FLOAT32:
        return "the GEMM kernels run float32 (transposed convolutions included)"
    return None


class TransposeShape:
    """The geometry of one ConvTranspose instruction."""

    def __init__(self, instr: Instr) -> None:
        base = instr.base_operands
        self.out, self.x, self.w = instr.operand(0), instr.operand(1), instr.operand(2)
        self.b = base[3] if len(base) > 3 else None
        attrs = instr.attrs
        self.n_batch, self.channels, *in_dims = self.x.type.shape
        _, self.mg, *kernel = self.w.type.shape
        self.in_dims, self.kernel = tuple(in_dims), tuple(kernel)
        self.out_dims = tuple(self.out.type.shape[2:])
        self.out_channels = self.out.type.shape[1]
        n = len(self.in_dims)
        self.strides, self.dilations = tuple(attrs.strides), tuple(attrs.dilations)
        self.begins = tuple(attrs.pads[:n])
        self.groups = attrs.group
        self.cg = self.channels // self.groups
        self.taps = math.prod(self.kernel)
        self.rows = self.mg * self.taps
        self.positions, self.out_volume = math.prod(self.in_dims), math.prod(self.out_dims)
        # 1x1, stride 1, nothing cropped or added: the columns are the output.
        self.pointwise = self.taps == 1 and self.out_dims == self.in_dims and not any(self.begins) and all(
            s == 1 for s in self.strides)
        self.col2im = Col2Im(self.mg, self.in_dims, self.kernel, self.strides, self.begins, self.dilations,
                             self.out_dims)
        # Input positions per GEMM call: all, or whole panels whose columns fit COLS_CHUNK_BYTES.
        self.chunk = self.positions
        if self.rows * self.positions * 4 > COLS_CHUNK_BYTES:
            chunks = -(-self.rows * self.positions * 4 // COLS_CHUNK_BYTES)
            self.chunk = min(self.positions, -(-self.positions // chunks // NR) * NR or NR)

    def packed_weights(self) -> np.ndarray:
        """W_g^T per group, row-major [g][rows][C/g]: A's element (row i, k) at i * (C/g) + k."""
        w = self.w.constant().astype(np.float32).reshape(self.groups, self.cg, self.rows)
        return np.ascontiguousarray(w.transpose(0, 2, 1))

    def cols_floats(self) -> int:
        return 0 if self.pointwise else -(-self.rows * self.chunk // _ALIGN_FLOATS) * _ALIGN_FLOATS


def _conv_transpose_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = TransposeShape(instr)
    threads = threads_for(options.num_threads, s.rows * s.positions * s.cg)
    scratch = s.cols_floats() * 4 + gemm_b_scratch(s.chunk, s.cg, threads, "direct")
    if is_whole_weight(s.w):
        return KernelPlan({"a": "packed", "threads": threads}, packed=[(s.w, "convt_rows", s.packed_weights())],
                          scratch_bytes=scratch)
    return KernelPlan({"a": "direct", "threads": threads}, scratch_bytes=scratch)


@C_KERNELS.kernel("conv_transpose_gemm", "ConvTranspose", accepts=accepts_conv_transpose,
                  plan=_conv_transpose_plan)
def emit_conv_transpose(em: Emitter, instr: Instr) -> str:
    s = TransposeShape(instr)
    threads = int(param(instr, "threads", 1))
    if param(instr, "a") == "packed":
        a, a_layout = f"{em.packed(instr)} + gi * {s.rows * s.cg}", (s.cg, 1, MR * s.cg)
    else:
        a, a_layout = f"{em.pointer(s.w, const=True)} + gi * {s.cg * s.rows}", (1, s.rows, MR)
    init = f"bias[gi * {s.mg} + m]" if s.b is not None else "0.0f"
    w = CWriter().line(
        f"const float *x = {em.pointer(s.x, const=True)};",
        f"float *y = {em.pointer(s.out)};",
        f"const float *bias = {em.pointer(s.b, const=True) if s.b is not None else 'NULL'};",
        "(void)bias;",
        f"float *cols = {em.scratch(instr)};",
        f"float *bscratch = cols + {s.cols_floats()};")
    w.line(f"for (long nb = 0; nb < {s.n_batch}; nb++)")
    with w.block(f"for (long gi = 0; gi < {s.groups}; gi++)"):
        w.line(f"const float *xg = x + nb * {s.channels * s.positions} + gi * {s.cg * s.positions};",
               f"float *yg = y + nb * {s.out_channels * s.out_volume} + gi * {s.mg * s.out_volume};")
        if s.pointwise:
            epilogue = Epilogue(bias=f"bias ? bias + gi * {s.mg} : NULL", bias_per_row=True)
            w.line(epilogue.c_init(), gemm_call(m=s.rows, n=s.positions, k=s.cg, a=a, a_layout=a_layout,
                                                b_direct="xg", c="yg", scratch="bscratch", threads=threads))
        elif s.chunk == s.positions:
            w.line(gemm_call(m=s.rows, n=s.positions, k=s.cg, a=a, a_layout=a_layout, b_direct="xg", c="cols",
                             epilogue="NULL", scratch="bscratch", threads=threads))
            s.col2im.emit(w, t="float", src="cols", dst="yg", threads=threads, init=init)
        else:
            # Each plane starts at its bias; then per chunk the GEMM, and col2im adds it in.
            w.line(f"for (long m = 0; m < {s.mg}; m++)",
                   f"    for (long q = 0; q < {s.out_volume}; q++) yg[m * {s.out_volume} + q] = {init};")
            a_rs, a_ks, a_block = a_layout
            with w.block(f"for (long q0 = 0; q0 < {s.positions}; q0 += {s.chunk})"):
                w.line(f"long q1 = q0 + {s.chunk} < {s.positions} ? q0 + {s.chunk} : {s.positions}, nq = q1 - q0;")
                w.call("ember_gemm", M=s.rows, N="nq", K=s.cg, a=a, a_rs=a_rs, a_ks=a_ks, a_block=a_block, bp="NULL",
                       pack="NULL", pack_ctx="NULL", b_direct="xg + q0", ldb=s.positions, koff="NULL", c="cols",
                       ldc="nq", ep="NULL", scratch="bscratch", nthreads=threads)
                s.col2im.emit(w, t="float", src="cols", dst="yg", threads=threads, init=None,
                              chunk=("q0", "q1", "nq"))
    return w.text()


# Col2Im ----------------------------------------------------------------------------------


def _accepts_col2im(view: OpView) -> str | None:
    return "no C kernel for Col2Im on bool tensors" if view.results[0].dtype is DType.BOOL else None


def _col2im_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    channels, work = instr.operand(0).type.shape[1], math.prod(instr.operand(1).type.shape)
    return KernelPlan({"threads": threads_for(options.num_threads, work) if channels > 1 else 1})


@C_KERNELS.kernel("col2im_loops", "Col2Im", accepts=_accepts_col2im, plan=_col2im_plan)
def emit_col2im(em: Emitter, instr: Instr) -> str:
    out, x = instr.operand(0), instr.operand(1)
    attrs = instr.attrs
    n_batch, channels = out.type.shape[:2]
    n = len(attrs.image_shape)
    t = c_type(out.type.dtype)
    image = channels * math.prod(attrs.image_shape)
    w = CWriter().line(f"const {t} *x = {em.pointer(x, const=True)};", f"{t} *y = {em.pointer(out)};")
    geometry = Col2Im(channels, attrs.blocks(), attrs.block_shape, attrs.strides, attrs.pads[:n], attrs.dilations,
                      attrs.image_shape)
    with w.block(f"for (long nb = 0; nb < {n_batch}; nb++)"):
        geometry.emit(w, t=t, src=f"(x + nb * {math.prod(x.type.shape[1:])})", dst=f"(y + nb * {image})",
                      threads=int(param(instr, "threads", 1)), init="0")
    return w.text()
