"""One case per ATen converter of the torch frontend (tests/test_torch_ops.py): the ATen op it
must produce after export and decomposition, a function in plain PyTorch that produces it,
and a maker of random inputs (random shapes too, from the case's seed). Imports torch."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class OpCase:
    op: str  # the ATen overload, e.g. "aten.add.Tensor"
    fn: Callable[..., torch.Tensor]
    inputs: Callable[[torch.Generator], tuple[torch.Tensor, ...]]


def _dims(gen: torch.Generator, rank: int, low: int = 2, high: int = 6) -> list[int]:
    return [int(d) for d in torch.randint(low, high + 1, (rank,), generator=gen)]


def _x(*shape_or_rank: int, low: float = -2.0, high: float = 2.0):
    """Inputs: one float tensor of a random shape of the given rank (or the given shape)."""
    def make(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        shape = _dims(gen, shape_or_rank[0]) if len(shape_or_rank) == 1 else list(shape_or_rank)
        return (torch.rand(shape, generator=gen) * (high - low) + low,)
    return make


def _xy(rank: int = 3, broadcast: bool = True, low: float = -2.0, high: float = 2.0, dtype=torch.float32):
    """Two tensors; the second broadcasts (a 1 on a random axis) when `broadcast`."""
    def make(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        shape = _dims(gen, rank)
        other = list(shape)
        if broadcast:
            other[int(torch.randint(0, rank, (1,), generator=gen))] = 1
        a = torch.rand(shape, generator=gen) * (high - low) + low
        b = torch.rand(other, generator=gen) * (high - low) + low
        if dtype != torch.float32:
            a, b = a.round().to(dtype), b.round().to(dtype)
        return a, b
    return make


def _ints(rank: int = 2, low: int = -5, high: int = 6):
    def make(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        shape = _dims(gen, rank)
        a = torch.randint(low, high, shape, generator=gen)
        b = torch.randint(1, high, shape, generator=gen) * (torch.randint(0, 2, shape, generator=gen) * 2 - 1)
        return a, b
    return make


def _image(channels: int = 4, size: int = 9, batch: int = 2):
    def make(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (torch.randn(batch, channels, size, size + 1, generator=gen),)
    return make


def _conv_inputs(transposed: bool = False, groups: int = 1):
    def make(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        x = torch.randn(2, 4, 8, 7, generator=gen)
        w = torch.randn((4, 6 // groups, 3, 3) if transposed else (6, 4 // groups, 3, 3), generator=gen)
        return x, w, torch.randn(6, generator=gen)
    return make


def _ramp(start: float, count: int = 4) -> torch.Tensor:
    """Per-channel parameters computed in the graph (they fold to constants)."""
    return torch.arange(count, dtype=torch.float32) * 0.25 + start


def _unary(name: str, fn: Callable[[torch.Tensor], torch.Tensor], low: float = -2.0, high: float = 2.0) -> OpCase:
    return OpCase(f"aten.{name}", fn, _x(3, low=low, high=high))


UNARY = [
    _unary("abs.default", torch.abs), _unary("neg.default", torch.neg), _unary("exp.default", torch.exp),
    _unary("log.default", torch.log, 0.1, 3), _unary("sqrt.default", torch.sqrt, 0.1, 3),
    _unary("reciprocal.default", torch.reciprocal, 0.5, 3), _unary("sin.default", torch.sin),
    _unary("cos.default", torch.cos), _unary("tan.default", torch.tan, -1, 1),
    _unary("asin.default", torch.asin, -0.9, 0.9), _unary("acos.default", torch.acos, -0.9, 0.9),
    _unary("atan.default", torch.atan), _unary("sinh.default", torch.sinh), _unary("cosh.default", torch.cosh),
    _unary("asinh.default", torch.asinh), _unary("acosh.default", torch.acosh, 1.1, 4),
    _unary("atanh.default", torch.atanh, -0.9, 0.9), _unary("tanh.default", torch.tanh),
    _unary("sigmoid.default", torch.sigmoid), _unary("relu.default", torch.relu), _unary("erf.default", torch.erf),
    _unary("floor.default", torch.floor), _unary("ceil.default", torch.ceil),
    _unary("round.default", lambda x: torch.round(x * 3)), _unary("sign.default", torch.sign),
    _unary("hardswish.default", F.hardswish, -5, 5), _unary("silu.default", F.silu), _unary("mish.default", F.mish),
    _unary("rsqrt.default", torch.rsqrt, 0.1, 3), _unary("expm1.default", torch.expm1),
    _unary("log1p.default", torch.log1p, -0.5, 3), _unary("trunc.default", lambda x: torch.trunc(x * 3)),
    _unary("isnan.default", lambda x: torch.isnan(torch.log(x))),
    _unary("isinf.default", lambda x: torch.isinf(1 / torch.round(x))),
    _unary("hardtanh.default", lambda x: F.hardtanh(x, -0.5, 1.0)),
    _unary("leaky_relu.default", lambda x: F.leaky_relu(x, 0.2)), _unary("elu.default", lambda x: F.elu(x, 0.7)),
    _unary("hardsigmoid.default", F.hardsigmoid, -4, 4), _unary("gelu.default", F.gelu),
    OpCase("aten.gelu.default", lambda x: F.gelu(x, approximate="tanh"), _x(3)),
    _unary("softplus.default", lambda x: F.softplus(x, beta=2.0), -5, 5),
    _unary("clamp.default", lambda x: torch.clamp(x, -0.5, 0.7)),
    _unary("logical_not.default", lambda x: torch.logical_not(x > 0)),
    _unary("bitwise_not.default", lambda x: torch.bitwise_not((x * 3).to(torch.int32))),
    _unary("_to_copy.default", lambda x: (x * 3).to(torch.int32)),
    _unary("clone.default", lambda x: x.t().contiguous() if x.dim() == 2 else x.transpose(0, 1).contiguous() * 2),
]

BINARY = [
    OpCase("aten.add.Tensor", lambda a, b: torch.add(a, b, alpha=0.5), _xy()),
    OpCase("aten.sub.Tensor", lambda a, b: a - 2 * b, _xy()),
    OpCase("aten.mul.Tensor", lambda a, b: a * b * 3, _xy()),
    OpCase("aten.div.Tensor", lambda a, b: a / (b.abs() + 0.5), _xy()),
    OpCase("aten.div.Tensor", lambda a, b: a / b, _ints()),
    OpCase("aten.div.Tensor_mode", lambda a, b: torch.div(a, b, rounding_mode="floor"), _ints()),
    OpCase("aten.div.Tensor_mode", lambda a, b: torch.div(a, b, rounding_mode="trunc"), _ints()),
    OpCase("aten.div.Tensor_mode", lambda a, b: torch.div(a, b + 3, rounding_mode="floor"), _xy(low=0.5)),
    OpCase("aten.maximum.default", torch.maximum, _xy()), OpCase("aten.minimum.default", torch.minimum, _xy()),
    OpCase("aten.remainder.Tensor", torch.remainder, _ints()),
    OpCase("aten.remainder.Scalar", lambda a, b: torch.remainder(a, 1.5) + b, _xy()),
    OpCase("aten.pow.Tensor_Tensor", lambda a, b: torch.pow(a.abs() + 0.1, b), _xy()),
    OpCase("aten.pow.Tensor_Scalar", lambda a, b: a ** 3 + b ** 2 + (a.abs() ** 0.5), _xy()),
    OpCase("aten.pow.Scalar", lambda a, b: 2.0 ** a + b, _xy()),
    OpCase("aten.where.self", lambda a, b: torch.where(a > b, a, b * 2), _xy()),
    OpCase("aten.clamp.Tensor", lambda a, b: torch.clamp(a, min=b), _xy()),
    OpCase("aten.bitwise_and.Tensor", lambda a, b: (a > 0) & (b > 0), _xy()),
    OpCase("aten.bitwise_and.Tensor", lambda a, b: a & b, _ints()),
    OpCase("aten.bitwise_or.Tensor", lambda a, b: a | b, _ints()),
    OpCase("aten.bitwise_xor.Tensor", lambda a, b: (a > 0) ^ (b > 0), _xy()),
    OpCase("aten.logical_and.default", lambda a, b: torch.logical_and(a > 0, b), _xy()),
    OpCase("aten.logical_or.default", lambda a, b: torch.logical_or(a > 0, b > 1), _xy()),
    OpCase("aten.logical_xor.default", lambda a, b: torch.logical_xor(a > 0, b > 1), _xy()),
]
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    BINARY.append(OpCase(f"aten.{_name}.Tensor", getattr(torch, _name), _xy(dtype=torch.int64)))
    BINARY.append(OpCase(f"aten.{_name}.Scalar", lambda a, b, _n=_name: getattr(torch, _n)(a, 1) & (b > 0),
                         _xy(dtype=torch.int64)))

TENSOR = [
    OpCase("aten.view.default", lambda x: x.reshape(x.shape[0], -1) * 2, _x(3)),
    OpCase("aten.permute.default", lambda x: x.permute(2, 0, 1) * 2, _x(3)),
    OpCase("aten.squeeze.dims", lambda x: x[:, :1].squeeze(1) * 2, _x(3)),
    OpCase("aten.unsqueeze.default", lambda x: x.unsqueeze(1) * 2, _x(3)),
    OpCase("aten.expand.default", lambda x: x[:, :1].expand(-1, 5, -1) * 2, _x(3)),
    OpCase("aten.cat.default", lambda x: torch.cat([x, x * 2, x[:, :1]], dim=1), _x(3)),
    OpCase("aten.slice.Tensor", lambda x: x[:, 1:-1, ::2] * 2, _x(3)),
    OpCase("aten.select.int", lambda x: x[:, -1] * 2, _x(3)),
    OpCase("aten.split_with_sizes.default", lambda x: torch.split(x, [1, 1, x.shape[2] - 2], dim=2)[2] * 2, _x(3)),
    OpCase("aten.flip.default", lambda x: torch.flip(x, [0, 2]), _x(3)),
    OpCase("aten.constant_pad_nd.default", lambda x: F.pad(x, (1, 2, 0, -1), value=0.5), _x(3)),
    OpCase("aten.reflection_pad2d.default", lambda x: F.pad(x, (1, 1, 2, 0), mode="reflect"), _image()),
    OpCase("aten.replication_pad2d.default", lambda x: F.pad(x, (1, 1, 2, 0), mode="replicate"), _image()),
    OpCase("aten.reflection_pad1d.default", lambda x: F.pad(x, (2, 1), mode="reflect"), _x(3)),
    OpCase("aten.replication_pad1d.default", lambda x: F.pad(x, (2, 1), mode="replicate"), _x(3)),
    OpCase("aten.reflection_pad3d.default", lambda x: F.pad(x[None], (1, 1, 1, 1, 1, 1), mode="reflect"), _x(4)),
    OpCase("aten.replication_pad3d.default", lambda x: F.pad(x[None], (1, 0, 1, 0, 0, 1), mode="replicate"), _x(4)),
    OpCase("aten.index_select.default", lambda x: torch.index_select(x, 1, torch.tensor([1, 0, 1])), _x(3)),
    OpCase("aten.gather.default", lambda x: torch.gather(x, 1, torch.full_like(x[:, :2], 1, dtype=torch.int64)), _x(3)),
    OpCase("aten.index.Tensor", lambda x: x[torch.tensor([1, 0, -1])] * 2, _x(3)),
    OpCase("aten.index.Tensor", lambda x: x[torch.tensor([[1, 0]]), torch.tensor([0, 1])] * 2, _x(3)),
    OpCase("aten.repeat.default", lambda x: x.repeat(2, 1, 1, 3), _x(3)),
    OpCase("aten.cumsum.default", lambda x: torch.cumsum(x, dim=1), _x(3)),
    OpCase("aten.triu.default", lambda x: torch.triu(x, 1), _x(3)),
    OpCase("aten.tril.default", lambda x: torch.tril(x, -1), _x(3)),
    OpCase("aten.topk.default", lambda x: torch.topk(x, 2, dim=1).values, _x(3)),
    OpCase("aten.sort.default", lambda x: torch.sort(x, dim=1, descending=True).values, _x(3)),
    OpCase("aten.sort.default", lambda x: torch.sort(x).indices, _x(3)),
    OpCase("aten.full.default", lambda x: x + torch.full(x.shape, 0.5), _x(3)),
    OpCase("aten.empty.memory_format", lambda x: torch.empty(x.shape).fill_(2.0) * x, _x(3)),
    OpCase("aten.scalar_tensor.default", lambda x: x.masked_fill(x > 0, 0.25), _x(3)),
    OpCase("aten.full_like.default", lambda x: torch.full_like(x, 3) - x, _x(3)),
    OpCase("aten.arange.start_step", lambda x: x * torch.arange(1, 1 + x.shape[-1] * 2, 2), _x(3)),
    OpCase("aten.embedding.default", lambda x: F.embedding((x.abs() * 3).long(), torch.arange(40.0).reshape(10, 4)),
           _x(2)),
]

NN = [
    OpCase("aten.convolution.default", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1), _conv_inputs()),
    OpCase("aten.convolution.default", lambda x, w, b: F.conv2d(x, w, b, padding=2, dilation=2, groups=2),
           _conv_inputs(groups=2)),
    OpCase("aten.convolution.default",
           lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
           _conv_inputs(transposed=True)),
    OpCase("aten._native_batch_norm_legit_no_training.default",
           lambda x: F.batch_norm(x, _ramp(-0.5), _ramp(0.5), _ramp(0.7), _ramp(-0.2), eps=1e-3), _image()),
    OpCase("aten.native_layer_norm.default", lambda x: F.layer_norm(x, x.shape[-2:], eps=1e-4), _x(3)),
    OpCase("aten.native_group_norm.default",
           lambda x: F.group_norm(x, 2, _ramp(0.5), _ramp(-0.3)), _image()),
    OpCase("aten.max_pool2d_with_indices.default", lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), _image()),
    OpCase("aten.max_pool3d_with_indices.default", lambda x: F.max_pool3d(x[None], 2), _x(4)),
    OpCase("aten.avg_pool2d.default", lambda x: F.avg_pool2d(x, 3, 2, 1), _image()),
    OpCase("aten.avg_pool2d.default", lambda x: F.avg_pool2d(x, 2, 1, count_include_pad=False, padding=1), _image()),
    OpCase("aten.avg_pool3d.default", lambda x: F.avg_pool3d(x[None], 2), _x(4)),
    OpCase("aten._adaptive_avg_pool2d.default", lambda x: F.adaptive_avg_pool2d(x, (3, 5)), _image(size=9)),
    OpCase("aten._adaptive_avg_pool3d.default", lambda x: F.adaptive_avg_pool3d(x, (2, 3, 2)), _x(1, 2, 4, 6, 4)),
    OpCase("aten.addmm.default", lambda x: torch.addmm(x[0], x[1], x[2].t(), beta=0.5, alpha=2), _x(3, 4, 4)),
    OpCase("aten.mm.default", lambda x: x[0] @ x[1], _x(2, 3, 3)),
    OpCase("aten.bmm.default", lambda x: x @ x.transpose(1, 2), _x(3)),
    OpCase("aten._softmax.default", lambda x: torch.softmax(x, dim=1), _x(3)),
    OpCase("aten.mul.Scalar", lambda x: F.scaled_dot_product_attention(x, x * 0.5, x.flip(1)), _x(3)),
    OpCase("aten._log_softmax.default", lambda x: torch.log_softmax(x, dim=-1), _x(3)),
    OpCase("aten.upsample_nearest2d.vec", lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), _image()),
    OpCase("aten.upsample_nearest1d.vec", lambda x: F.interpolate(x, size=7, mode="nearest"), _x(3)),
    OpCase("aten.upsample_nearest3d.vec", lambda x: F.interpolate(x[None], scale_factor=2), _x(4)),
    OpCase("aten.upsample_bilinear2d.vec", lambda x: F.interpolate(x, size=(5, 13), mode="bilinear"), _image()),
    OpCase("aten.upsample_bilinear2d.vec",
           lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True), _image()),
    OpCase("aten.upsample_linear1d.vec", lambda x: F.interpolate(x, size=9, mode="linear"), _x(3)),
    OpCase("aten.upsample_trilinear3d.vec", lambda x: F.interpolate(x[None], scale_factor=2, mode="trilinear"),
           _x(4)),
]

with torch.random.fork_rng():
    torch.manual_seed(0)
    _LSTMS = [torch.nn.LSTM(5, 6, num_layers=2, bidirectional=True, batch_first=True).eval(),
              torch.nn.LSTM(5, 6, bias=False).eval(), torch.nn.GRU(5, 6, num_layers=2, bidirectional=True).eval(),
              torch.nn.GRU(5, 4, batch_first=True).eval()]
NN += [
    OpCase("aten.lstm.input", lambda x: _LSTMS[0](x[:, :, :5])[0], _x(2, 4, 5)),
    OpCase("aten.lstm.input", lambda x: _LSTMS[1](x[:, :, :5])[1][1], _x(3, 2, 5)),
    OpCase("aten.gru.input", lambda x: torch.cat([_LSTMS[2](x)[0].flatten(), _LSTMS[2](x)[1].flatten()]),
           _x(4, 3, 5)),
    OpCase("aten.gru.input", lambda x: _LSTMS[3](x)[0], _x(2, 5, 5)),
]

REDUCE = [
    OpCase("aten.sum.dim_IntList", lambda x: x.sum(dim=(0, 2)), _x(3)),
    OpCase("aten.sum.dim_IntList", lambda x: (x > 0).sum(dim=1, keepdim=True), _x(3)),
    OpCase("aten.mean.dim", lambda x: x.mean(dim=-1, keepdim=True), _x(3)),
    OpCase("aten.mean.default", lambda x: x.mean(), _x(3)),
    OpCase("aten.prod.dim_int", lambda x: x.prod(dim=1), _x(3)),
    OpCase("aten.prod.default", lambda x: (x * 0.5 + 1).prod(), _x(2)),
    OpCase("aten.amax.default", lambda x: x.amax(dim=(1, 2)), _x(3)),
    OpCase("aten.amin.default", lambda x: x.amin(dim=0), _x(3)),
    OpCase("aten.var.correction", lambda x: x.var(dim=1), _x(3)),
    OpCase("aten.var.correction", lambda x: torch.var(x, dim=(0, 2), correction=0, keepdim=True), _x(3)),
    OpCase("aten.any.dim", lambda x: (x > 1.5).any(dim=1), _x(3)),
    OpCase("aten.any.dims", lambda x: (x > 1.5).any(dim=(0, 1)), _x(3)),
    OpCase("aten.any.default", lambda x: (x > 1.5).any(), _x(3)),
    OpCase("aten.argmax.default", lambda x: x.argmax(dim=1), _x(3)),
    OpCase("aten.argmax.default", lambda x: x.argmax(), _x(3)),
    OpCase("aten.argmin.default", lambda x: x.argmin(dim=-1, keepdim=True), _x(3)),
    OpCase("aten.max.dim", lambda x: torch.max(x, dim=1).values + torch.max(x, dim=1).indices, _x(3)),
    OpCase("aten.linalg_vector_norm.default", lambda x: torch.linalg.vector_norm(x, dim=1), _x(3)),
    OpCase("aten.linalg_vector_norm.default", lambda x: torch.linalg.vector_norm(x, 1, dim=(0, 2), keepdim=True),
           _x(3)),
    OpCase("aten.linalg_vector_norm.default", lambda x: torch.linalg.vector_norm(x, float("inf")), _x(3)),
    OpCase("aten.min.dim", lambda x: torch.min(x, dim=2, keepdim=True).indices, _x(3)),
]

GROUPS: dict[str, list[OpCase]] = {"unary": UNARY, "binary": BINARY, "tensor": TENSOR, "nn": NN, "reduce": REDUCE}

# Converters no case exercises, and why.
EXEMPT = {
    "aten.native_batch_norm.default": "training-mode form, refused (tests/test_torch_errors.py)",
    "aten._native_batch_norm_legit.default": "training-mode form, refused",
    "aten._native_batch_norm_legit_functional.default": "training-mode form, refused (test_torch_errors.py)",
    "aten.native_dropout.default": "training-mode form, refused",
    "aten.alias.default": "an alias the functionalized program keeps only in odd cases: a plain copy",
    "aten.lift_fresh_copy.default": "a constant lifted into the graph: a plain copy",
}
