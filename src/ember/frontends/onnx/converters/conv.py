"""Converters for ConvTranspose (explicit pads, auto_pad or output_shape), LpPool,
GlobalLpPool, MaxUnpool, Col2Im, GridSample and AffineGrid. MaxPool's Indices output is handled with MaxPool in
nn.py."""
from __future__ import annotations

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.converters.nn import window_attrs
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops.conv import Col2ImAttrs, ConvTransposeAttrs, LpPoolAttrs, MaxUnpoolAttrs
from ember.ops.reduce import ReduceAttrs
from ember.ops.sampling import AffineGridAttrs, GridSampleAttrs
from ember.support.errors import ModelImportError


def _spatial_ints(ctx: NodeContext, name: str, n: int, default: int) -> tuple[int, ...]:
    values = ctx.attr_ints(name, None) or (default,) * n
    if len(values) != n:
        raise ModelImportError(f"{name} {list(values)} must have one value per spatial axis ({n})")
    return tuple(values)


@converter("ConvTranspose")
def conv_transpose(ctx: NodeContext) -> list[Value]:
    x, w, b = ctx.require(0, "X"), ctx.require(1, "W"), ctx.input(2)
    if x.type.rank < 3 or w.type.rank != x.type.rank:
        raise ModelImportError(f"input {x.type} and weight {w.type} must have equal rank >= 3")
    n = x.type.rank - 2
    kernel = w.type.shape[2:]
    strides = _spatial_ints(ctx, "strides", n, 1)
    dilations = _spatial_ints(ctx, "dilations", n, 1)
    output_padding = _spatial_ints(ctx, "output_padding", n, 0)
    auto_pad = ctx.attr_str("auto_pad", "NOTSET")
    output_shape = ctx.attr_ints("output_shape", None) or None  # an empty list gives none
    if output_shape is not None and len(output_shape) > n:
        output_shape = output_shape[-n:]  # some exporters give [N, C, spatial...]
    if output_shape is not None and (len(output_shape) != n or min(output_shape) < 1):
        raise ModelImportError(f"output_shape {list(output_shape)} must give {n} positive spatial sizes")
    full = [strides[i] * (x.type.shape[2 + i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1
            for i in range(n)]
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # The spec's rule (floor division, so a negative total pads the end).
        targets = output_shape or [x.type.shape[2 + i] * strides[i] for i in range(n)]
        total = [full[i] - targets[i] for i in range(n)]
        if auto_pad == "SAME_UPPER":
            begins = [t // 2 for t in total]
        else:
            begins = [t - t // 2 for t in total]
        pads = tuple(begins + [t - bgn for t, bgn in zip(total, begins, strict=True)])
    elif auto_pad in ("NOTSET", "VALID"):
        pads = tuple(ctx.attr_ints("pads", None) or (0,) * (2 * n)) if auto_pad == "NOTSET" else (0,) * (2 * n)
        if len(pads) != 2 * n:
            raise ModelImportError(f"pads {list(pads)} must have {2 * n} values")
    else:
        raise ModelImportError(f"auto_pad '{auto_pad}' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID")
    # output_padding is folded into the end pads: both only move where the output ends.
    end_pads = tuple(pads[n + i] - output_padding[i] for i in range(n))
    attrs = ConvTransposeAttrs(strides, pads[:n] + end_pads, dilations, ctx.attr_int("group", 1))
    return ctx.result("ConvTranspose", [x, w, b], attrs)


@converter("LpPool")
def lp_pool(ctx: NodeContext) -> list[Value]:
    x = ctx.require(0)
    kernel = ctx.attr_ints("kernel_shape")
    if x.type.rank < 3 or len(kernel) != x.type.rank - 2:
        raise ModelImportError(f"kernel_shape {list(kernel)} does not match input {x.type}")
    strides, pads, dilations = window_attrs(ctx, x.type.shape[2:], kernel)
    attrs = LpPoolAttrs(tuple(kernel), strides, pads, dilations, ctx.attr_bool("ceil_mode", False),
                        ctx.attr_int("p", 2))
    return ctx.result("LpPool", [x], attrs)


@converter("GlobalLpPool")
def global_lp_pool(ctx: NodeContext) -> list[Value]:
    x = ctx.require(0)
    if x.type.rank < 3:
        raise ModelImportError(f"input {x.type} must have rank >= 3")
    p = ctx.attr_int("p", 2)
    spatial = x.type.shape[2:]
    if p in (1, 2):
        return ctx.result("ReduceL1" if p == 1 else "ReduceL2", [x], ReduceAttrs(tuple(range(2, x.type.rank))))
    n = len(spatial)
    attrs = LpPoolAttrs(tuple(spatial), (1,) * n, (0,) * (2 * n), (1,) * n, False, p)
    return ctx.result("LpPool", [x], attrs)


@converter("MaxUnpool")
def max_unpool(ctx: NodeContext) -> list[Value]:
    x, indices = ctx.require(0, "X"), ctx.require(1, "I")
    kernel = ctx.attr_ints("kernel_shape")
    n = len(kernel)
    if x.type.rank != n + 2:
        raise ModelImportError(f"X is {x.type}, but kernel_shape {list(kernel)} asks for a {n + 2}-D input")
    strides = _spatial_ints(ctx, "strides", n, 1)
    pads = tuple(ctx.attr_ints("pads", None) or (0,) * (2 * n))
    attrs = MaxUnpoolAttrs((), tuple(kernel), strides, pads)
    output = attrs.default_dims(x.type.shape[2:])
    shape = ctx.constant_ints(2, "output_shape")
    if shape is not None:
        output = tuple(shape[-n:])
    attrs = MaxUnpoolAttrs(tuple(output), tuple(kernel), strides, pads)
    return ctx.result("MaxUnpool", [x, indices], attrs)


@converter("Col2Im", min_opset=18)
def col2im(ctx: NodeContext) -> list[Value]:
    image = ctx.constant_ints(1, "image_shape")
    block = ctx.constant_ints(2, "block_shape")
    if image is None or block is None or len(image) != len(block):
        raise ModelImportError("image_shape and block_shape are required and must have the same length")
    n = len(image)
    attrs = Col2ImAttrs(tuple(image), tuple(block), _spatial_ints(ctx, "strides", n, 1),
                        tuple(ctx.attr_ints("pads", None) or (0,) * (2 * n)), _spatial_ints(ctx, "dilations", n, 1))
    return ctx.result("Col2Im", [ctx.require(0)], attrs)


_GRID_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic", "nearest": "nearest"}


@converter("GridSample", min_opset=16)
def grid_sample(ctx: NodeContext) -> list[Value]:
    mode = ctx.attr_str("mode", "bilinear" if ctx.opset < 20 else "linear")
    if mode not in _GRID_MODES:
        raise ModelImportError(f"mode '{mode}' is not one of {', '.join(_GRID_MODES)}")
    attrs = GridSampleAttrs(_GRID_MODES[mode], ctx.attr_str("padding_mode", "zeros"),
                            ctx.attr_bool("align_corners", False))
    return ctx.result("GridSample", [ctx.require(0, "X"), ctx.require(1, "grid")], attrs)


@converter("AffineGrid", min_opset=20)
def affine_grid(ctx: NodeContext) -> list[Value]:
    size = ctx.constant_ints(1, "size")
    if size is None:
        raise ModelImportError("required input 1 (size) is missing")
    attrs = AffineGridAttrs(tuple(size), ctx.attr_bool("align_corners", False))
    return ctx.result("AffineGrid", [ctx.require(0, "theta")], attrs)
