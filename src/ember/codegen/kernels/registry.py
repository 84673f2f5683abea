"""The kernel table and the loop-nest helpers every family uses."""
from __future__ import annotations

from collections.abc import Callable, Sequence

KernelEmitter = Callable[..., str]
C_KERNELS: dict[str, KernelEmitter] = {}


def kernel(*names: str) -> Callable[[KernelEmitter], KernelEmitter]:
    def register(fn: KernelEmitter) -> KernelEmitter:
        for name in names:
            if name in C_KERNELS:
                raise ValueError(f"two C kernels for {name}")
            C_KERNELS[name] = fn
        return fn

    return register


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return strides


def broadcast_strides(in_shape: Sequence[int], out_shape: Sequence[int]) -> list[int]:
    """Element strides of an input broadcast to `out_shape` (0 along broadcast axes)."""
    strides = contiguous_strides(in_shape)
    pad = len(out_shape) - len(in_shape)
    out = [0] * pad
    for dim, stride in zip(in_shape, strides):
        out.append(0 if dim == 1 else stride)
    return out


def collapse(shape: Sequence[int], strides_list: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """Merges adjacent axes that every operand walks contiguously, so loop nests stay shallow
    (an elementwise op over same-shaped tensors becomes one flat loop)."""
    dims = [d for d in shape]
    strides = [list(s) for s in strides_list]
    keep = [i for i, d in enumerate(dims) if d != 1]
    dims = [dims[i] for i in keep]
    strides = [[s[i] for i in keep] for s in strides]
    out_dims: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for axis, dim in enumerate(dims):
        if out_dims and all(s[axis] * dim == o[-1] for s, o in zip(strides, out_strides)):
            out_dims[-1] *= dim
            for s, o in zip(strides, out_strides):
                o[-1] = s[axis]
            continue
        out_dims.append(dim)
        for s, o in zip(strides, out_strides):
            o.append(s[axis])
    return out_dims, out_strides


def loop_nest(dims: Sequence[int], strides_list: Sequence[Sequence[int]], names: Sequence[str],
              body: Callable[[list[str]], str], var: str = "i") -> str:
    """Nested loops over `dims`; `body` gets one offset expression per operand."""
    lines = []
    depth = len(dims)
    for axis, dim in enumerate(dims):
        lines.append("    " * axis + f"for (long {var}{axis} = 0; {var}{axis} < {dim}; {var}{axis}++) {{")
    offsets = []
    for strides, name in zip(strides_list, names):
        terms = [f"{var}{axis} * {s}" if s != 1 else f"{var}{axis}" for axis, s in enumerate(strides) if s != 0]
        offsets.append(" + ".join(terms) if terms else "0")
    lines.append("    " * depth + body(offsets))
    for axis in range(depth - 1, -1, -1):
        lines.append("    " * axis + "}")
    return "\n".join(lines)
