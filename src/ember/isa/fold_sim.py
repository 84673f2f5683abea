"""A fast functional simulator of mappings: the same result and the same cycle count as
`ember.isa.simulate.run_mapping`, computed per operand tile with NumPy instead of one
instruction issue at a time, so whole networks run through it.

Each instruction operand is gathered once from the kernel's tensor in the instruction's
layout, over the kernel dimensions fused onto each instruction dimension and the outer loops
that index it (reads past a tensor's edge, i.e. a convolution's zero border, are zeros; an
im2col happens here). The instruction's semantics then runs as one einsum over those tiles,
outer loops as batch axes and a split reduction summed, and the result is scattered back into
the kernel's output. Cycles are counted by the description as the issue-by-issue simulator
counts them: every issue (fold) pays the instruction's cost at its own lengths, a padded lane
counted, a `<=N` dimension's last issue shorter, and a streamed (`*`) dimension issued in
tiles of `stream` elements (the schedule's) or whole.

It needs every index of the instruction's own operands to be a plain dimension (true of the
described matrix units and vector instructions); `supported` says why not otherwise.
Imports isa.expr, isa.mapper, isa.simulate and numpy."""
from __future__ import annotations

import itertools
import math
import string
from collections.abc import Mapping as MappingOf

import numpy as np

from ember.isa.expr import Access
from ember.isa.mapper import AxisMap, Mapping
from ember.isa.simulate import Simulation


def supported(mapping: Mapping) -> str | None:
    """Why the fast simulator cannot run `mapping` (None when it can)."""
    semantics = mapping.instruction.semantics
    for access in semantics.operands:
        if any(index.plain is None for index in access.indices):
            return f"{mapping.instruction.name}: operand {access.tensor} has a compound index"
    for index in mapping.kernel.expr.output.indices:
        if len(index.terms) != 1 and not _channel_like(index, mapping):
            return f"the kernel's output index {index} is not one dimension"
    return None


def _channel_like(index, mapping: Mapping) -> bool:
    """g*M + m: two dimensions, the inner one's extent the outer's stride (injective)."""
    if len(index.terms) != 2:
        return False
    (outer, stride), (inner, unit) = index.terms
    return unit == 1 and mapping.kernel.expr.extents[inner] == stride


def issue_lengths(axis: AxisMap, stream: int | None) -> list[tuple[int, int]]:
    """(length, how many issues) along one instruction dimension."""
    if axis.width is None:
        tile = axis.extent if stream is None else max(1, min(stream, axis.extent))
        lengths = [(tile, axis.extent // tile), (axis.extent % tile, 1)]
    elif axis.upto:
        lengths = [(axis.width, axis.extent // axis.width), (axis.extent % axis.width, 1)]
    else:
        lengths = [(axis.width, axis.issues)]
    return [(length, count) for length, count in lengths if length > 0 and count > 0] or [(1, 1)]


def count_cycles(mapping: Mapping, stream: int | None = None) -> tuple[int, float]:
    """(issues, cycles) of one run of the kernel through `mapping`, by the description."""
    instruction = mapping.instruction
    extents = mapping.kernel.expr.extents
    outer = math.prod(extents[d] for d in mapping.outer)
    per_axis = [issue_lengths(axis, stream) for axis in mapping.axes]
    issues, cycles = 0, 0.0
    for combination in itertools.product(*per_axis):
        count = math.prod(c for _, c in combination)
        lengths = {axis.dim: length for axis, (length, _) in zip(mapping.axes, combination, strict=True)}
        issues += count
        cycles += count * instruction.issue_cycles(lengths)
    return issues * outer, cycles * outer


Grid = list[tuple[bool, str]]  # (an instruction dim?, name): kernel and instruction names may clash


def _values(mapping: Mapping, dims: Grid) -> dict[str, np.ndarray]:
    """Kernel dimension values over a grid whose axes are `dims` (outer kernel dims and
    instruction dims, each instruction dim over its fused kernel dims, row-major)."""
    extents = mapping.kernel.expr.extents
    axes = {a.dim: a for a in mapping.axes}
    values: dict[str, np.ndarray] = {}
    for position, (instruction_dim, dim) in enumerate(dims):
        shape = [1] * len(dims)
        if instruction_dim:
            axis = axes[dim]
            shape[position] = max(axis.extent, 1)
            flat = np.arange(max(axis.extent, 1)).reshape(shape)
            for fused in reversed(axis.fused):
                values[fused] = flat % extents[fused]
                flat = flat // extents[fused]
        else:
            shape[position] = extents[dim]
            values[dim] = np.arange(extents[dim]).reshape(shape)
    return values


def _gather(mapping: Mapping, access: Access, array: np.ndarray, dims: Grid) -> np.ndarray:
    values = _values(mapping, dims)
    zero = np.zeros((1,) * len(dims), dtype=np.int64)
    index = [sum((c * values.get(d, zero) for d, c in i.terms), zero) + i.constant for i in access.indices]
    shape = np.broadcast_shapes(*(i.shape for i in index)) if index else ()
    index = [np.broadcast_to(i, shape) for i in index]
    inside = np.ones(shape, dtype=bool)
    for i, extent in zip(index, array.shape, strict=True):
        inside &= (i >= 0) & (i < extent)
    clipped = tuple(np.clip(i, 0, extent - 1) for i, extent in zip(index, array.shape, strict=True))
    block = array[clipped] if index else np.broadcast_to(array, shape)
    return np.where(inside, block, np.zeros((), dtype=array.dtype))


def _grid(mapping: Mapping, kernel_access: Access, instruction_access: Access) -> Grid:
    """The outer loops indexing the kernel's tensor, then the instruction operand's dims."""
    return ([(False, d) for d in mapping.outer if d in kernel_access.dims]
            + [(True, i.plain or "") for i in instruction_access.indices])


def run_folds(mapping: Mapping, arrays: MappingOf[str, np.ndarray], out_shape: tuple[int, ...],
              stream: int | None = None, dtype: np.dtype | None = None,
              kept: dict[str, np.ndarray] | None = None) -> Simulation:
    """The kernel's output computed through `mapping` tile by tile (see the module), in
    `dtype` (default: the instruction's output element type), with the issues and cycles the
    issue-by-issue simulator counts for a stream of `stream` elements (None: whole). kept:
    the gathered blocks of the kernel's constant tensors, filled on the first call and reused
    (the weights are laid out once, as a compile-time pack)."""
    reason = supported(mapping)
    if reason is not None:
        raise ValueError(f"the fold simulator cannot run this mapping: {reason}")
    expr, semantics = mapping.kernel.expr, mapping.instruction.semantics
    kind = np.dtype(dtype) if dtype is not None else np.dtype(semantics.output.dtype.numpy)
    roles = dict(mapping.roles)
    letters = iter(string.ascii_letters)
    names = {key: next(letters) for key in [(False, d) for d in mapping.outer] + [(True, a.dim) for a in mapping.axes]}
    operands, subscripts = [], []
    for access in (semantics.a, semantics.b):
        kernel_access = expr.access(roles[access.tensor])
        dims = _grid(mapping, kernel_access, access)
        tensor = roles[access.tensor]
        if kept is not None and tensor in kept:
            block = kept[tensor]
        else:
            block = _gather(mapping, kernel_access, arrays[tensor].astype(kind, copy=False), dims)
            if kept is not None and tensor in mapping.kernel.constants:
                kept[tensor] = block
        operands.append(block)
        subscripts.append("".join(names[d] for d in dims))
    output_access = expr.access(roles[semantics.output.tensor])
    out_dims = _grid(mapping, output_access, semantics.output)
    result = np.einsum(f"{subscripts[0]},{subscripts[1]}->{''.join(names[d] for d in out_dims)}", *operands,
                       optimize=True)
    out = np.zeros(out_shape, dtype=kind)
    values = _values(mapping, out_dims)
    zero = np.zeros((1,) * len(out_dims), dtype=np.int64)
    index = tuple(np.broadcast_to(sum((c * values.get(d, zero) for d, c in i.terms), zero) + i.constant, result.shape)
                  for i in output_access.indices)
    out[index] = result  # the output index is injective (supported), so no position is written twice
    issues, cycles = count_cycles(mapping, stream)
    return Simulation(out, issues, cycles)


__all__ = ["count_cycles", "issue_lengths", "run_folds", "supported"]
