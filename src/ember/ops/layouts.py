"""The channels-last forms of ops (FusedConv, InvertedResidual): their `x_channels_last` /
`y_channels_last` attributes say that x, or y with the residual, is NHWC ([N, H, W, C])
instead of NCHW. The assign-layouts pass (transforms/layouts.py) sets them; these are the
permutations between the two layouts and the type of a tensor moved between them."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ember.ops.registry import OpError, get_op
from ember.types import TensorType

# The Transpose perms between the layouts.
TO_NCHW = (0, 3, 1, 2)
TO_NHWC = (0, 2, 3, 1)


def channels_last(attrs: object) -> bool:
    """Whether a node with these attributes is a channels-last form (either end NHWC): passes
    that read a convolution's shapes as NCHW leave such nodes alone."""
    return bool(getattr(attrs, "x_channels_last", False) or getattr(attrs, "y_channels_last", False))


def residual_operand(op: str) -> int:
    """The index of `op`'s residual operand (in y's layout in a channels-last form), as the
    op's definition names it."""
    return get_op(op).operands.index("residual?")


def permuted(t: TensorType, perm: tuple[int, ...]) -> TensorType:
    """`t` with its axes in `perm`'s order."""
    return replace(t, shape=tuple(t.shape[axis] for axis in perm))


def infer_channels_last(op: str, infer: Callable[[Any, list], Any], attrs: Any,
                        types: Sequence[Any]) -> list[TensorType]:
    """A channels-last form's result type: `infer` (the op's NCHW inference) on x and the
    residual (in y's layout) taken to NCHW, its result to y's layout."""
    residual = residual_operand(op)
    nchw = list(types)
    x, r = nchw[0], nchw[residual] if len(nchw) > residual else None
    if x.rank != 4 or (r is not None and r.rank != 4):
        raise OpError(f"{op}'s channels-last forms take 4-D x and residual, got {x} and {r}")
    if attrs.x_channels_last:
        nchw[0] = permuted(x, TO_NCHW)
    if attrs.y_channels_last and r is not None:
        nchw[residual] = permuted(r, TO_NCHW)
    (y,) = infer(replace(attrs, x_channels_last=False, y_channels_last=False), nchw)
    return [permuted(y, TO_NHWC) if attrs.y_channels_last else y]


def reference_channels_last(op: str, reference: Callable[[Any, list], Any], attrs: Any,
                            arrays: Sequence[Any]) -> tuple[np.ndarray]:
    """A channels-last form's value: the op's NCHW `reference` between the same transposes."""
    residual = residual_operand(op)
    nchw = list(arrays)
    if attrs.x_channels_last:
        nchw[0] = nchw[0].transpose(TO_NCHW)
    if attrs.y_channels_last and len(nchw) > residual and nchw[residual] is not None:
        nchw[residual] = nchw[residual].transpose(TO_NCHW)
    (y,) = reference(replace(attrs, x_channels_last=False, y_channels_last=False), nchw)
    return (np.ascontiguousarray(y.transpose(TO_NHWC)) if attrs.y_channels_last else y,)


__all__ = ["TO_NCHW", "TO_NHWC", "channels_last", "infer_channels_last", "permuted", "reference_channels_last",
           "residual_operand"]
