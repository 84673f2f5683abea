"""Convolution and pooling kernels (NCHW).

Conv runs as GEMM per image and group: A = the weights as stored ([M][C*KH*KW]); B = the
input read in place through phase planes and an offset table (ember_conv_direct), or, for
dilated convolutions, im2col panels of 32 output pixels packed by the runtime core. Bias, residual and activation run in
the tile epilogue. 3x3 stride-1 convolutions with enough channels and outputs run as Winograd
F(2x2, 3x3) instead (ember_winograd.c: 2.25x fewer multiply-adds, weights transformed at compile
time). Depthwise convolution (one input and one output channel per group) has
its own direct kernel with per-tap loop bounds, so the inner loops carry no bounds checks."""
from __future__ import annotations

import math

import numpy as np

from ember.codegen.c_types import c_type, lowest
from ember.codegen.kernels.gemm import MR, PARALLEL_MIN_MACS, Epilogue, emit_gemm_call, threads_for
from ember.codegen.kernels.registry import kernel
from ember.lir.ir import BufferKind, Instr
from ember.ops.fused import FusedConvAttrs
from ember.support.errors import UnsupportedError
from ember.types import DType


class DirectLayout:
    """Mirror of conv_plan / ember_conv_direct_offsets in runtime/ember_conv.c: phase planes
    of the padded input and the per-tap offsets the GEMM reads B through."""

    def __init__(self, channels: int, out_hw: tuple[int, int], kernel: tuple[int, int], stride: int) -> None:
        self.channels, self.kernel, self.stride = channels, kernel, stride
        self.hph = out_hw[0] + (kernel[0] - 1) // stride + 2
        self.wph = out_hw[1] + (kernel[1] - 1) // stride
        self.plane = self.hph * self.wph
        self.grid = out_hw[0] * self.wph
        self.key = f"{channels}x{out_hw}x{kernel}s{stride}"

    def scratch_bytes(self) -> int:
        return (self.stride ** 2 * self.channels * self.plane + 2 * 32) * 4

    def offsets(self) -> np.ndarray:
        s, (kh, kw) = self.stride, self.kernel
        c, u, v = np.meshgrid(np.arange(self.channels), np.arange(kh), np.arange(kw), indexing="ij")
        phase = (u % s) * s + v % s
        koff = (phase * self.channels + c) * self.plane + (u // s) * self.wph + v // s
        return koff.reshape(-1).astype(np.int32)


class WinogradLayout:
    """Mirror of the plan in runtime/ember_winograd.c: F(2x2, 3x3) over 2x2 output tiles,
    taken in blocks of 32 tiles, one block per thread at a time."""

    BLOCK = 32
    G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])

    def __init__(self, channels: int, out_channels: int, out_hw: tuple[int, int]) -> None:
        self.channels, self.out_channels = channels, out_channels
        tiles_w = (out_hw[1] + 1) // 2
        self.tiles = (out_hw[0] + 1) // 2 * tiles_w
        self.blocks = math.ceil(self.tiles / self.BLOCK)
        self.half = math.ceil((tiles_w + 1) / 16) * 16

    @classmethod
    def applies(cls, kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int], channels: int,
                out_channels: int, out_hw: tuple[int, int]) -> bool:
        """Where it measured faster than the direct kernel: the GEMMs need some depth and
        width (32+ channels each way), and a map of at least one full block of tiles (maps
        below ~11x11 waste most of their only block, and stream 16/9 more weights)."""
        return (kernel == (3, 3) and strides == (1, 1) and dilations == (1, 1)
                and min(channels, out_channels) >= 32 and cls(channels, out_channels, out_hw).tiles >= cls.BLOCK)

    def scratch_bytes(self, threads: int) -> int:
        planes = 16 * ((self.channels + self.out_channels) * self.BLOCK + 32)
        return (planes + 8 * self.half) * max(1, min(self.blocks, threads)) * 4

    def transformed_weights(self, w: np.ndarray) -> np.ndarray:
        """U = G g G^T per (output, input) channel pair, as [16][M][C] (4x4 position major)."""
        u = np.einsum("ai,mcij,bj->abmc", self.G, w.astype(np.float64), self.G)
        return np.ascontiguousarray(u.reshape(16, self.out_channels, self.channels), dtype=np.float32)


def depthwise_scratch_bytes(width: int) -> int:
    """Mirror of ember_depthwise_scratch_bytes in runtime/ember_depthwise.c: one row of zeros."""
    return (width + 16) * 4


def _conv_parts(instr: Instr):
    out, x, w, b = instr.operands[:4]
    residual = instr.operands[4] if len(instr.operands) > 4 else None
    attrs = instr.attrs
    if isinstance(attrs, FusedConvAttrs):
        epilogue = (attrs.activation, attrs.alpha, attrs.beta)
        conv = attrs.conv
    else:
        epilogue = ("none", 0.0, 0.0)
        conv = attrs
    return out, x, w, b, residual, conv, epilogue


@kernel("Conv", "FusedConv")
def emit_conv(em, instr: Instr) -> str:
    out, x, w, b, residual, conv, (act, alpha, beta) = _conv_parts(instr)
    if out.type.dtype is not DType.FLOAT32 or x.type.rank != 4:
        raise UnsupportedError(f"node '{instr.source}': the C backend runs 2-D float32 convolutions only")
    if w.kind is not BufferKind.WEIGHT:
        raise UnsupportedError(f"node '{instr.source}': the C backend needs constant convolution weights")
    n_batch, channels, height, width = x.type.shape
    out_channels, cg, kh, kw = w.type.shape
    groups = conv.group
    oh, ow = out.type.shape[2:]
    (sh, sw), (dh, dw) = conv.strides, conv.dilations
    pt, pl = conv.pads[0], conv.pads[1]
    depthwise = cg == 1 and out_channels == groups
    geometry = (f"{cg if not depthwise else channels}, {height}, {width}, {kh}, {kw}, {sh}, {sw}, {pt}, {pl}, "
                f"{dh}, {dw}, {oh}, {ow}")
    lines = [
        f"const float *x = {em.pointer(x, const=True)};",
        f"float *y = {em.pointer(out)};",
        f"const float *bias = {em.pointer(b, const=True) if b is not None else 'NULL'};",
        f"const float *res = {em.pointer(residual, const=True) if residual is not None else 'NULL'};",
        "(void)bias; (void)res;",
    ]
    pixels = oh * ow
    if depthwise:
        threads = em.num_threads if channels * pixels * kh * kw >= PARALLEL_MIN_MACS // 4 else 1
        em.need_scratch(depthwise_scratch_bytes(width))
        lines += [
            Epilogue(activation=act, alpha=alpha, beta=beta).c_init(),
            f"for (long nb = 0; nb < {n_batch}; nb++) {{",
            f"    ember_conv_geom g = {{ x + nb * {channels * height * width}, {geometry} }};",
            f"    ember_depthwise(&g, {em.pointer(w, const=True)}, bias, res ? res + nb * {out_channels * pixels} : NULL, "
            f"y + nb * {out_channels * pixels}, &ep, (float *)S, {threads});",
            "}",
        ]
        return "\n".join(lines)
    mg = out_channels // groups
    k = cg * kh * kw
    group_a = mg * k
    threads = threads_for(em, mg * pixels * k)
    if em.winograd and groups == 1 and WinogradLayout.applies((kh, kw), (sh, sw), (dh, dw), cg, mg, (oh, ow)):
        layout = WinogradLayout(cg, mg, (oh, ow))
        em.need_scratch(layout.scratch_bytes(threads))
        u = em.packed_weight(w, "winograd_f2x3", layout.transformed_weights(w.data))
        lines += [
            Epilogue(activation=act, alpha=alpha, beta=beta).c_init(),
            f"for (long nb = 0; nb < {n_batch}; nb++) {{",
            f"    ember_conv_geom g = {{ x + nb * {channels * height * width}, {geometry} }};",
            f"    long base = nb * {out_channels * pixels};",
            f"    ember_winograd(&g, {mg}, {u}, bias, res ? res + base : NULL, y + base, &ep, (float *)S, {threads});",
            "}",
        ]
        return "\n".join(lines)
    # The direct and im2col paths read the weights in place, row-major [M][C*KH*KW]: broadcasting A
    # from K-strided rows measured faster in the tile than from 8-row interleaved blocks. The
    # pointer is taken in those branches only, since taking it puts the weights in the blob
    # (Winograd and the transposed 1x1 GEMM read repacked copies instead).
    if sh == sw and dh == dw == 1 and not (kh == kw == 1 and sh == 1 and conv.pads == (0, 0, 0, 0)):
        layout = DirectLayout(cg, (oh, ow), (kh, kw), sh)
        em.need_scratch(layout.scratch_bytes())
        koff = em.constant(f"koff{layout.key}", layout.offsets(), "int32_t")
        epilogue = Epilogue(activation=act, alpha=alpha, beta=beta)
        lines += [
            epilogue.c_init(),
            f"for (long nb = 0; nb < {n_batch}; nb++)",
            f"for (long gi = 0; gi < {groups}; gi++) {{",
            f"    ember_conv_geom g = {{ x + nb * {channels * height * width} + gi * {cg * height * width}, {geometry} }};",
            f"    long base = nb * {out_channels * pixels} + gi * {mg * pixels};",
            f"    ember_conv_direct(&g, {mg}, {em.pointer(w, const=True)} + gi * {group_a}, {koff}, bias ? bias + gi * {mg} : NULL, "
            f"res ? res + base : NULL, y + base, &ep, (float *)S, {threads});",
            "}",
        ]
        return "\n".join(lines)
    pointwise = kh == kw == 1 and conv.strides == (1, 1) and conv.pads == (0, 0, 0, 0)
    if pointwise and groups == 1 and pixels < 64 and pixels % 32 and mg >= 64:
        return "\n".join(lines + _pointwise_transposed(em, w, mg, k, pixels, n_batch, channels * height * width,
                                                          act, alpha, beta, threads))
    b_source = {"b_direct": "xg"} if pointwise else {"packer": "ember_pack_im2col", "pack_ctx": "&pk"}
    context = "" if pointwise else f"ember_conv_geom pk = {{ xg, {geometry} }};"
    epilogue = Epilogue(bias=f"bias ? bias + gi * {mg} : NULL", bias_per_row=True,
                        residual="res ? res + base : NULL", ld_residual=pixels,
                        activation=act, alpha=alpha, beta=beta)
    call = emit_gemm_call(em, m=mg, n=pixels, k=k, a=f"{em.pointer(w, const=True)} + gi * {group_a}", a_layout=(k, 1, MR * k),
                          c="y + base", threads=threads, **b_source)
    lines += [
        f"for (long nb = 0; nb < {n_batch}; nb++)",
        f"for (long gi = 0; gi < {groups}; gi++) {{",
        f"    const float *xg = x + nb * {channels * height * width} + gi * {cg * height * width};",
        f"    long base = nb * {out_channels * pixels} + gi * {mg * pixels};",
        *([f"    {context}"] if context else []),
        f"    {epilogue.c_init()}",
        f"    {call}",
        "}",
    ]
    return "\n".join(lines)


def _pointwise_transposed(em, w, m: int, k: int, pixels: int, n_batch: int, image: int, act: str, alpha: float,
                          beta: float, threads: int) -> list[str]:
    """A 1x1 convolution over few pixels (7x7 maps) as Y^T = X^T W^T: the pixels become the
    GEMM's rows, in 8-row blocks, and the many output channels its 32-wide columns, which
    wastes far less than 49 pixels padded to two 32-column panels. W^T is packed at compile
    time; the tiles store transposed, straight into NCHW y, with bias, residual and
    activation applied on the way."""
    from ember.codegen.kernels.gemm import pack_panels

    packed = em.packed_weight(w, "pointwise_t_panels32", pack_panels(w.data.reshape(m, k).T.astype(np.float32)))
    residual = f"res ? res + nb * {m * pixels} : NULL"
    epilogue = Epilogue(bias="bias", residual=residual, ld_residual=pixels, activation=act, alpha=alpha, beta=beta,
                        transposed=True)
    return [
        f"for (long nb = 0; nb < {n_batch}; nb++) {{",
        f"    {epilogue.c_init()}",
        f"    ember_gemm({pixels}, {m}, {k}, x + nb * {image}, 1, {pixels}, {MR}, {packed}, NULL, NULL, NULL, 0, "
        f"NULL, y + nb * {m * pixels}, {pixels}, &ep, NULL, {threads});",
        "}",
    ]


def _pool_loops(em, instr: Instr, init: str, accumulate: str, finish) -> str:
    out, x = instr.operands
    attrs = instr.attrs
    if x.type.rank != 4:
        raise UnsupportedError(f"node '{instr.source}': the C backend runs 2-D pooling only")
    n_batch, channels, height, width = x.type.shape
    oh, ow = out.type.shape[2:]
    (kh, kw), (sh, sw), (dh, dw) = attrs.kernel, attrs.strides, attrs.dilations
    pt, pl = attrs.pads[0], attrs.pads[1]
    t = c_type(x.type.dtype)
    items = n_batch * channels
    lines = [f"const {t} *x = {em.pointer(x, const=True)};", f"{t} *y = {em.pointer(out)};"]
    if em.num_threads > 1 and items * oh * ow * kh * kw >= PARALLEL_MIN_MACS:
        lines.append(f"#pragma omp parallel for {em.threads_pragma} schedule(static)")
    lines += [
        f"for (long item = 0; item < {items}; item++)",
        f"for (long i = 0; i < {oh}; i++)",
        f"for (long j = 0; j < {ow}; j++) {{",
        f"    const {t} *xc = x + item * {height * width};",
        f"    {init}",
        f"    long count = 0; (void)count;",
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


@kernel("MaxPool")
def emit_maxpool(em, instr: Instr) -> str:
    t = instr.operands[1].type.dtype
    nan = "val != val || " if t.is_float else ""
    return _pool_loops(em, instr, f"{c_type(t)} acc = {lowest(t)};", f"if ({nan}val > acc) acc = val;",
                       lambda out: "acc")


@kernel("AveragePool")
def emit_avgpool(em, instr: Instr) -> str:
    attrs = instr.attrs
    out = instr.operands[0]
    t = out.type.dtype
    if attrs.count_include_pad:
        # Cells inside input + explicit pads count; ceil-mode overhang beyond the pads does not.
        (kh, kw), (sh, sw), (dh, dw) = attrs.kernel, attrs.strides, attrs.dilations
        height, width = instr.operands[1].type.shape[2:]
        pt, pl, pb, pr = attrs.pads
        counts = (
            f"(double)(({{ long n_ = 0; for (long u = 0; u < {kh}; u++) {{ long ih = i * {sh} - {pt} + u * {dh}; "
            f"if (ih < -{pt} || ih >= {height + pb}) continue; for (long v = 0; v < {kw}; v++) {{ "
            f"long iw = j * {sw} - {pl} + v * {dw}; if (iw >= -{pl} && iw < {width + pr}) n_++; }} }} n_; }}))"
        )
        finish = lambda o: f"({c_type(t)})(acc / {counts})"  # noqa: E731
    else:
        finish = lambda o: f"({c_type(t)})(count ? acc / count : 0.0)"  # noqa: E731
    return _pool_loops(em, instr, "double acc = 0.0;", "acc += val; count++;", finish)


@kernel("ArgMax", "ArgMin")
def emit_arg_reduce(em, instr: Instr) -> str:
    out, x = instr.operands
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
        f"    for (long j = 1; j < {n}; j++) if (row[j * {inner}] {better} best) {{ best = row[j * {inner}]; at = j; }}",
        f"    y[o * {inner} + i] = at;",
        "}",
    ])




def accepts(node) -> bool:
    """Whether these kernels run a graph node: 2-D (NCHW) windows only, and convolutions need
    constant float32 weights (they are read as the GEMM's A operand)."""
    from ember.graph import Constant

    x = node.inputs[0]
    if x.type.rank != 4:
        return False
    if node.op in ("Conv", "FusedConv"):
        return isinstance(node.inputs[1], Constant) and x.type.dtype is DType.FLOAT32
    return True
