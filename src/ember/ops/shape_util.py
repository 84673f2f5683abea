"""Shape arithmetic shared by op definitions (broadcasting, axes, window sizes)."""
from __future__ import annotations

import math
from collections.abc import Sequence

from ember.ops.registry import OpError
from ember.support import limits
from ember.types import DType, Shape, TensorType


def broadcast_shapes(*shapes: Shape) -> Shape:
    """NumPy (multidirectional) broadcasting, as ONNX defines it."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise OpError(f"shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise OpError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def normalize_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    out = tuple(sorted(normalize_axis(a, rank) for a in axes))
    if len(set(out)) != len(out):
        raise OpError(f"repeated axis in {list(axes)}")
    return out


def same_dtype(types: Sequence[TensorType | None], op: str) -> DType:
    present = [t for t in types if t is not None]
    dtypes = {t.dtype for t in present}
    if len(dtypes) != 1:
        raise OpError(f"{op} needs operands of one element type, got {', '.join(sorted(str(d) for d in dtypes))}")
    return present[0].dtype


def require_float(t: TensorType, op: str, operand: str = "input") -> None:
    if not t.dtype.is_float:
        raise OpError(f"{op} needs a floating-point {operand}, got {t.dtype}")


def require_rank(t: TensorType, rank: int, op: str, operand: str) -> None:
    if t.rank != rank:
        raise OpError(f"{op}: {operand} must have rank {rank}, got shape {list(t.shape)}")


def pooled_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int,
                dilation: int, ceil_mode: bool) -> int:
    """Output length of a window op along one axis (ONNX Conv/Pool formula)."""
    if kernel < 1 or stride < 1 or dilation < 1:
        raise OpError(f"window of size {kernel}, stride {stride} and dilation {dilation}: each must be positive")
    extent = dilation * (kernel - 1) + 1
    span = size + pad_begin + pad_end - extent
    if span < 0:
        raise OpError(f"window of extent {extent} does not fit an input of {size} with pads "
                      f"({pad_begin}, {pad_end})")
    out = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
    # With ceil_mode the last window must still start inside the input or its begin pad.
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def check_padded_input(x: TensorType, pads: Sequence[int], op: str) -> None:
    """A window op's input with its pads (what the NumPy reference materializes) within the
    tensor size limit: auto_pad SAME with a kernel of 2**63 asks for pads that large."""
    spatial = x.rank - 2
    padded = math.prod(x.shape[:2]) * math.prod(d + pads[i] + pads[i + spatial] for i, d in enumerate(x.shape[2:]))
    limits.check_tensor(padded * x.dtype.itemsize, f"the padded input of {op}")


def product(values: Sequence[int]) -> int:
    return math.prod(values)
