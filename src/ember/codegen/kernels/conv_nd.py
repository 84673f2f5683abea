"""3-D convolution (NCDHW) on the GEMM core, per image and group, A the weights read in place
([M][C * KD * KH * KW], so they may arrive at run time). Variants, tried in this order:
  conv3d_direct  stride 1, any dilation: the input copied once into a zero-padded volume,
                 then one GEMM per output depth slice reading B in place through an offset
                 table (as conv_direct does in 2-D) on a grid a few columns wider than the
                 output, the tiles dropping the extra columns as they store;
  conv3d_gemm    the rest: B the input in place (1x1x1, stride 1, no padding) or 3-D im2col
                 panels packed at run time (ember_pack_im2col3d).
Groups, dilations and padding of any size; bias, residual and activation run in the tile
epilogue as in 2-D. 1-D and 2-D convolutions are conv.py's."""
from __future__ import annotations

import math

import numpy as np

from ember.codegen.c_constants import c_activation
from ember.codegen.c_types import c_literal
from ember.codegen.c_writer import CWriter, init
from ember.codegen.emitter import Emitter, param
from ember.codegen.kernels.conv import ConvOperands
from ember.codegen.kernels.gemm import Epilogue, gemm_b_scratch, gemm_call
from ember.codegen.kernels.layouts import MR, NR, threads_for
from ember.codegen.kernels.registry import KernelOptions, KernelPlan, OpView, contiguous_strides
from ember.codegen.kernels.table import C_KERNELS
from ember.lir.ir import Instr
from ember.types import DType


def accepts_conv3d(view: OpView) -> str | None:
    if view.results[0].dtype is not DType.FLOAT32:
        return "the GEMM kernels run float32 (convolutions included)"
    if view.operand(0).rank != 5:
        return "only 1-D, 2-D (NCHW) and 3-D convolutions have C kernels"
    return None


class Conv3dShape(ConvOperands):
    """The geometry of one 3-D Conv/FusedConv instruction."""

    def __init__(self, instr: Instr) -> None:
        super().__init__(instr)
        conv = self.conv
        self.n_batch, self.channels, *self.dims = self.x.type.shape
        self.out_channels, self.cg, *self.kernel = self.w.type.shape
        self.out_dims = list(self.out.type.shape[2:])
        self.strides, self.dilations, self.pads = tuple(conv.strides), tuple(conv.dilations), tuple(conv.pads)
        self.groups = conv.group
        self.mg = self.out_channels // self.groups
        self.k = self.cg * math.prod(self.kernel)
        self.pixels = math.prod(self.out_dims)
        self.volume = math.prod(self.dims)
        self.pointwise = (all(k == 1 for k in self.kernel) and all(s == 1 for s in self.strides)
                          and not any(self.pads))

    def geometry(self, name: str, x: str) -> str:
        (d, h, w_), (kd, kh, kw), (sd, sh, sw), (dd, dh, dw) = self.dims, self.kernel, self.strides, self.dilations
        od, oh, ow = self.out_dims
        return init("ember_conv3d_geom", name, x=x, C=self.cg, D=d, H=h, W=w_, KD=kd, KH=kh, KW=kw, SD=sd, SH=sh,
                    SW=sw, PD=self.pads[0], PH=self.pads[1], PW=self.pads[2], DD=dd, DH=dh, DW=dw, OD=od, OH=oh,
                    OW=ow)


    def prologue(self, em: Emitter) -> list[str]:
        return [f"const float *x = {em.pointer(self.x, const=True)};",
                f"float *y = {em.pointer(self.out)};",
                f"const float *bias = {em.pointer(self.b, const=True) if self.b is not None else 'NULL'};",
                f"const float *res = {em.pointer(self.residual, const=True) if self.residual is not None else 'NULL'};",
                "(void)bias; (void)res;"]


# conv3d_direct ---------------------------------------------------------------------------


class PaddedVolume:
    """conv3d_direct's layout: each input channel zero-padded to [Dp][Hp][Wp] (the output
    size plus the dilated kernel's extent less one along each axis, stride 1), and the
    offset of tap (c, a, u, v) in it: output (od, oh, ow) reads it at
    od * Hp * Wp + oh * Wp + ow past that offset."""

    def __init__(self, s: Conv3dShape) -> None:
        self.padded = tuple(o + (k - 1) * d for o, k, d in zip(s.out_dims, s.kernel, s.dilations, strict=True))
        self.channel = math.prod(self.padded)
        self.channels = s.cg
        self.kernel, self.dilations = tuple(s.kernel), tuple(s.dilations)

    def offsets(self) -> np.ndarray:
        strides = contiguous_strides(self.padded)
        c, a, u, v = np.meshgrid(*(np.arange(n) for n in (self.channels, *self.kernel)), indexing="ij")
        koff = c * self.channel + sum(t * d * st for t, d, st in zip((a, u, v), self.dilations, strides, strict=True))
        return np.asarray(koff, np.int64).reshape(-1).astype(np.int32)

    def scratch_bytes(self) -> int:
        # The tiles read up to NR - 1 floats past a slice's last grid column: zeros after the end.
        return (self.channels * self.channel + 2 * NR) * 4


def _direct3d_applies(instr: Instr, options: KernelOptions) -> bool:
    s = Conv3dShape(instr)
    volume = PaddedVolume(s)
    return (all(st == 1 for st in s.strides) and not s.pointwise and volume.channels * volume.channel + 2 * NR < 2**31
            and s.pixels > 0)


def _direct3d_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = Conv3dShape(instr)
    volume = PaddedVolume(s)
    key = "_".join([f"c{s.cg}", *("x".join(map(str, dims)) for dims in (volume.padded, s.kernel, s.dilations))])
    return KernelPlan({"threads": threads_for(options.num_threads, s.mg * s.pixels * s.k)},
                      tables=[(key, "direct3d_offsets", volume.offsets())], scratch_bytes=volume.scratch_bytes())


@C_KERNELS.kernel("conv3d_direct", "Conv", "FusedConv", accepts=accepts_conv3d, applies=_direct3d_applies,
                  plan=_direct3d_plan)
def emit_conv3d_direct(em: Emitter, instr: Instr) -> str:
    s = Conv3dShape(instr)
    volume = PaddedVolume(s)
    (d, h, w_), (dp, hp, wp) = s.dims, volume.padded
    od, oh, ow = s.out_dims
    pd, ph, pw = s.pads[:3]
    threads = int(param(instr, "threads", 1))
    act, alpha, beta = s.activation
    f32 = DType.FLOAT32
    epilogue = init("ember_epilogue", "ep", bias=f"bias ? bias + gi * {s.mg} : NULL", bias_per_row=1,
                    residual="NULL", ld_residual=s.pixels, act=c_activation(act), alpha=c_literal(alpha, f32),
                    beta=c_literal(beta, f32), grid_w=wp, out_w=ow)
    w = CWriter().line(*s.prologue(em), f"float *vol = {em.scratch(instr)};",
                       f"const int32_t *koff = {em.table(instr)};",
                       f"memset(vol + {volume.channels * volume.channel}, 0, {2 * NR} * sizeof(float));")
    w.line(f"for (long nb = 0; nb < {s.n_batch}; nb++)")
    with w.block(f"for (long gi = 0; gi < {s.groups}; gi++)"):
        w.line(f"const float *xg = x + nb * {s.channels * s.volume} + gi * {s.cg * s.volume};",
               f"long base = nb * {s.out_channels * s.pixels} + gi * {s.mg * s.pixels};")
        if threads > 1:
            w.line(f"#pragma omp parallel for num_threads({threads}) schedule(static)")
        with w.block(f"for (long row = 0; row < {s.cg * dp * hp}; row++)"):
            w.line(f"float *dst = vol + row * {wp};",
                   f"long c = row / {dp * hp}, id = row / {hp} % {dp} - {pd}, ih = row % {hp} - {ph};",
                   f"if (id < 0 || id >= {d} || ih < 0 || ih >= {h}) {{",
                   f"    memset(dst, 0, {wp} * sizeof(float));",
                   "    continue;",
                   "}",
                   f"memset(dst, 0, {pw} * sizeof(float));",
                   f"memcpy(dst + {pw}, xg + (c * {d} + id) * {h * w_} + ih * {w_}, {w_} * sizeof(float));",
                   f"memset(dst + {pw + w_}, 0, {wp - pw - w_} * sizeof(float));")
        w.line(epilogue)
        with w.block(f"for (long od = 0; od < {od}; od++)"):
            w.line(f"ep.residual = res ? res + base + od * {oh * ow} : NULL;",
                   gemm_call(m=s.mg, n=oh * wp, k=s.k, a=f"{em.pointer(s.w, const=True)} + gi * {s.mg * s.k}",
                             a_layout=(s.k, 1, MR * s.k), b_direct=f"vol + od * {hp * wp}", ldb=0, koff="koff",
                             c=f"y + base + od * {oh * ow}", ldc=s.pixels, threads=threads))
    return w.text()


# conv3d_gemm -----------------------------------------------------------------------------


def _conv3d_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    s = Conv3dShape(instr)
    threads = threads_for(options.num_threads, s.mg * s.pixels * s.k)
    b = "direct" if s.pointwise else "im2col"
    return KernelPlan({"b": b, "threads": threads}, scratch_bytes=gemm_b_scratch(s.pixels, s.k, threads, b))


@C_KERNELS.kernel("conv3d_gemm", "Conv", "FusedConv", accepts=accepts_conv3d, plan=_conv3d_plan)
def emit_conv3d_gemm(em: Emitter, instr: Instr) -> str:
    s = Conv3dShape(instr)
    direct = param(instr, "b") == "direct"
    act, alpha, beta = s.activation
    epilogue = Epilogue(bias=f"bias ? bias + gi * {s.mg} : NULL", bias_per_row=True,
                        residual="res ? res + base : NULL", ld_residual=s.pixels, activation=act, alpha=alpha,
                        beta=beta)
    call = gemm_call(m=s.mg, n=s.pixels, k=s.k, a=f"{em.pointer(s.w, const=True)} + gi * {s.mg * s.k}",
                     a_layout=(s.k, 1, MR * s.k), c="y + base", scratch=em.scratch(instr),
                     threads=int(param(instr, "threads", 1)), b_direct="xg" if direct else "NULL",
                     packer="NULL" if direct else "ember_pack_im2col3d", pack_ctx="NULL" if direct else "&pk")
    w = CWriter().line(*s.prologue(em))
    w.line(f"for (long nb = 0; nb < {s.n_batch}; nb++)")
    with w.block(f"for (long gi = 0; gi < {s.groups}; gi++)"):
        w.line(f"const float *xg = x + nb * {s.channels * s.volume} + gi * {s.cg * s.volume};",
               f"long base = nb * {s.out_channels * s.pixels} + gi * {s.mg * s.pixels};")
        if not direct:
            w.line(s.geometry("pk", "xg"))
        w.line(epilogue.c_init(), call)
    return w.text()
