"""The channels-last forms of ops (FusedConv, InvertedResidual): their `x_channels_last` /
`y_channels_last` attributes say that x, or y with the residual, is NHWC ([N, H, W, C])
instead of NCHW. The assign-layouts pass (transforms/layouts.py) sets them; these are the
permutations between the two layouts and the type of a tensor moved between them."""
from __future__ import annotations

from dataclasses import replace

from ember.types import TensorType

# The Transpose perms between the layouts.
TO_NCHW = (0, 3, 1, 2)
TO_NHWC = (0, 2, 3, 1)


def channels_last(attrs: object) -> bool:
    """Whether a node with these attributes is a channels-last form (either end NHWC): passes
    that read a convolution's shapes as NCHW leave such nodes alone."""
    return bool(getattr(attrs, "x_channels_last", False) or getattr(attrs, "y_channels_last", False))


def permuted(t: TensorType | None, perm: tuple[int, ...]) -> TensorType | None:
    """`t` with its axes in `perm`'s order (None stays None)."""
    return None if t is None else replace(t, shape=tuple(t.shape[axis] for axis in perm))


__all__ = ["TO_NCHW", "TO_NHWC", "channels_last", "permuted"]
