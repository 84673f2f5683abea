"""Neural-network ATen ops: convolution (and transposed), batch/layer/group normalization in
inference form, pooling, matrix products, softmax, embedding and upsampling. Training-mode
forms (batch statistics, dropout) are refused: Ember compiles inference only."""
from __future__ import annotations

import numpy as np

from ember.frontends.torch.context import AtenContext
from ember.frontends.torch.registry import aten
from ember.graph.ir import Value
from ember.ops.conv import ConvTransposeAttrs
from ember.ops.nn import BatchNormAttrs, ConvAttrs, GemmAttrs, PoolAttrs
from ember.ops.normalization import GroupNormAttrs, LayerNormAttrs, SoftmaxAttrs
from ember.ops.reduce import ReduceAttrs
from ember.ops.resize import ResizeAttrs
from ember.ops.tensor import AxisAttrs
from ember.support.errors import UnsupportedOpError
from ember.types import DType


def _spatial(values: tuple[int, ...], count: int, default: int) -> tuple[int, ...]:
    if not values:
        return (default,) * count
    return values * count if len(values) == 1 else values


@aten("convolution.default")
def _convolution(ctx: AtenContext) -> Value:
    x, w = ctx.tensor("input"), ctx.tensor("weight")
    bias = ctx.optional_tensor("bias")
    spatial = x.type.rank - 2
    strides = _spatial(ctx.ints("stride"), spatial, 1)
    pads = _spatial(ctx.ints("padding"), spatial, 0)
    dilations = _spatial(ctx.ints("dilation"), spatial, 1)
    groups = ctx.ints("groups")[0]
    if ctx["transposed"]:
        extra = _spatial(ctx.ints("output_padding"), spatial, 0)
        ends = tuple(p - e for p, e in zip(pads, extra, strict=True))
        return ctx.emit1("ConvTranspose", [x, w, bias], ConvTransposeAttrs(strides, pads + ends, dilations, groups))
    return ctx.emit1("Conv", [x, w, bias], ConvAttrs(strides, pads + pads, dilations, groups))


@aten("_native_batch_norm_legit_no_training.default")
def _batch_norm(ctx: AtenContext) -> list[Value | None]:
    x = ctx.tensor("input")
    channels = x.type.shape[1]
    scale = ctx.optional_tensor("weight") or ctx.constant(_filled(channels, 1.0, x.type.dtype))
    bias = ctx.optional_tensor("bias") or ctx.constant(_filled(channels, 0.0, x.type.dtype))
    y = ctx.emit1("BatchNormalization", [x, scale, bias, ctx.tensor("running_mean"), ctx.tensor("running_var")],
                  BatchNormAttrs(float(ctx.number("eps") or 0)))
    return [y, None, None]


def _filled(count: int, value: float, dtype: DType) -> np.ndarray:
    return np.full((count,), value, dtype=dtype.numpy)


@aten("native_layer_norm.default")
def _layer_norm(ctx: AtenContext) -> list[Value | None]:
    x = ctx.tensor("input")
    normalized = ctx.ints("normalized_shape")
    axis = x.type.rank - len(normalized)
    scale = ctx.optional_tensor("weight") or ctx.constant(_filled(1, 1.0, x.type.dtype))
    y = ctx.emit1("LayerNormalization", [x, scale, ctx.optional_tensor("bias")],
                  LayerNormAttrs(axis, float(ctx.number("eps") or 0)))
    return [y, None, None]


@aten("native_group_norm.default")
def _group_norm(ctx: AtenContext) -> list[Value | None]:
    x = ctx.tensor("input")
    channels = x.type.shape[1]
    scale = ctx.optional_tensor("weight") or ctx.constant(_filled(channels, 1.0, x.type.dtype))
    bias = ctx.optional_tensor("bias") or ctx.constant(_filled(channels, 0.0, x.type.dtype))
    y = ctx.emit1("GroupNormalization", [x, scale, bias],
                  GroupNormAttrs(ctx.ints("group")[0], float(ctx.number("eps") or 0)))
    return [y, None, None]


@aten("native_batch_norm.default", "_native_batch_norm_legit.default", "_native_batch_norm_legit_functional.default",
      "native_dropout.default")
def _training_only(ctx: AtenContext) -> Value:
    raise UnsupportedOpError("this is the training-mode form (batch statistics or dropout); Ember compiles "
                             "inference only: call model.eval() before exporting")


def _pool_attrs(ctx: AtenContext, spatial: int, dilation: bool) -> PoolAttrs:
    kernel = _spatial(ctx.ints("kernel_size"), spatial, 1)
    strides = _spatial(ctx.ints("stride"), spatial, 0) if ctx.ints("stride") else kernel
    pads = _spatial(ctx.ints("padding"), spatial, 0)
    dilations = _spatial(ctx.ints("dilation"), spatial, 1) if dilation else (1,) * spatial
    include_pad = bool(ctx.args.get("count_include_pad", False))
    return PoolAttrs(kernel, strides, pads + pads, dilations, bool(ctx["ceil_mode"]), include_pad)


@aten("max_pool2d_with_indices.default", "max_pool3d_with_indices.default")
def _max_pool(ctx: AtenContext) -> list[Value | None]:
    x = ctx.tensor("self")
    if ctx.result_used(1):
        raise UnsupportedOpError("the indices of max pooling are used; Ember computes the maxima only")
    return [ctx.emit1("MaxPool", [x], _pool_attrs(ctx, x.type.rank - 2, True)), None]


@aten("avg_pool2d.default", "avg_pool3d.default")
def _avg_pool(ctx: AtenContext) -> Value:
    x = ctx.tensor("self")
    if ctx.args.get("divisor_override") is not None:
        raise UnsupportedOpError("avg_pool with divisor_override is not supported")
    return ctx.emit1("AveragePool", [x], _pool_attrs(ctx, x.type.rank - 2, False))


@aten("_adaptive_avg_pool2d.default", "_adaptive_avg_pool3d.default")
def _adaptive_avg_pool(ctx: AtenContext) -> Value:
    x = ctx.tensor("self")
    sizes = ctx.ints("output_size")
    spatial = x.type.shape[2:]
    if all(s == 1 for s in sizes):
        return ctx.emit1("ReduceMean", [x], ReduceAttrs(tuple(range(2, x.type.rank)), True))
    if any(d % s for d, s in zip(spatial, sizes, strict=True)):
        raise UnsupportedOpError(f"adaptive average pooling of {list(spatial)} to {list(sizes)} (sizes that do not "
                                 "divide the input: windows of different sizes) is not supported")
    kernel = tuple(d // s for d, s in zip(spatial, sizes, strict=True))
    return ctx.emit1("AveragePool", [x], PoolAttrs(kernel, kernel, (0,) * 2 * len(kernel), (1,) * len(kernel)))


@aten("addmm.default")
def _addmm(ctx: AtenContext) -> Value:
    beta, alpha = ctx.number("beta", 1.0), ctx.number("alpha", 1.0)
    a, b, c = ctx.tensor("mat1"), ctx.tensor("mat2"), ctx.tensor("self")
    return ctx.emit1("Gemm", [a, b, c], GemmAttrs(float(alpha or 0), float(beta or 0)))


@aten("mm.default", "bmm.default")
def _matmul(ctx: AtenContext) -> Value:
    return ctx.emit1("MatMul", [ctx.tensor("self"), ctx.tensor("mat2")])


def _softmax(op: str):
    def convert(ctx: AtenContext) -> Value:
        x = ctx.tensor("self", ctx.out_dtype())
        return ctx.emit1(op, [x], SoftmaxAttrs(ctx.ints("dim")[0]))

    return convert


aten("_softmax.default")(_softmax("Softmax"))
aten("_log_softmax.default")(_softmax("LogSoftmax"))


@aten("embedding.default")
def _embedding(ctx: AtenContext) -> Value:
    return ctx.emit1("Gather", [ctx.tensor("weight"), ctx.tensor("indices")], AxisAttrs(0))


def _resize(ctx: AtenContext, mode: str, transform: str) -> Value:
    x = ctx.tensor("input" if "input" in ctx.args else "self")
    out = ctx.out_shape()
    scales = tuple(o / i for o, i in zip(out, x.type.shape, strict=True))
    factors = ctx.args.get("scale_factors")
    if factors and transform != "align_corners":  # the factors as given: sizes are rounded down from them
        scales = (1.0, 1.0) + tuple(float(f) for f in factors)
    nearest = "floor" if mode == "nearest" else "round_prefer_floor"
    return ctx.emit1("Resize", [x], ResizeAttrs(out, scales, mode, transform, nearest))


@aten("upsample_nearest2d.vec", "upsample_nearest1d.vec", "upsample_nearest3d.vec")
def _upsample_nearest(ctx: AtenContext) -> Value:
    return _resize(ctx, "nearest", "asymmetric")


@aten("upsample_bilinear2d.vec", "upsample_linear1d.vec", "upsample_trilinear3d.vec")
def _upsample_linear(ctx: AtenContext) -> Value:
    transform = "align_corners" if ctx["align_corners"] else "pytorch_half_pixel"
    return _resize(ctx, "linear", transform)
