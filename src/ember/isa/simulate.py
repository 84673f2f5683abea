"""A functional simulator of mappings (NumPy): runs a kernel the way a mapping says, one
instruction issue at a time. Each issue gathers its operand blocks from the kernel's tensors
in the instruction's layout (padded lanes and reads past a tensor's edge are zeros), computes
the instruction's own semantics on them, and adds the output block back. Agreement with the
kernel's direct evaluation is what makes a mapping legal in fact, not only by construction.

It is meant for small shapes (tests, the NPU's functional model): every issue is a Python
loop over the instruction's points. It also counts the cycles the unit is busy by the
description, which the scheduler's compute term must agree with. Imports isa.expr, isa.mapper and numpy."""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping as MappingOf
from dataclasses import dataclass

import numpy as np

from ember.isa.expr import Access, TensorExpr
from ember.isa.mapper import Mapping


def evaluate_expr(expr: TensorExpr, arrays: MappingOf[str, np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray:
    """The expression point by point (float64), inputs zero past their edges."""
    out = np.zeros(out_shape, dtype=np.float64)
    names = [d.name for d in expr.domain]
    for point in itertools.product(*(range(d.extent or 1) for d in expr.domain)):
        values = dict(zip(names, point, strict=True))
        product = _read(expr.a, arrays[expr.a.tensor], values) * _read(expr.b, arrays[expr.b.tensor], values)
        out[tuple(i.evaluate(values) for i in expr.output.indices)] += product
    return out


def _read(access: Access, array: np.ndarray, values: MappingOf[str, int]) -> float:
    index = tuple(i.evaluate(values) for i in access.indices)
    if all(0 <= i < s for i, s in zip(index, array.shape, strict=True)):
        return float(array[index])
    return 0.0


@dataclass(frozen=True)
class Simulation:
    """What running a mapping gave: the kernel's output, the instruction issues, and the cycles
    the unit was busy by the description (1/throughput per issue, or the cycles formula at the
    issue's stream length), with no memory stalls."""

    out: np.ndarray
    issues: int
    cycles: float


def run_mapping(mapping: Mapping, arrays: MappingOf[str, np.ndarray], out_shape: tuple[int, ...]) -> Simulation:
    """The kernel's output computed through `mapping`, one issue at a time."""
    expr, semantics = mapping.kernel.expr, mapping.instruction.semantics
    extents = expr.extents
    out = np.zeros(out_shape, dtype=np.float64)
    axes = {a.dim: a for a in mapping.axes}
    roles = dict(mapping.roles)
    issues, cycles = 0, 0.0
    outer_ranges = [range(extents[d]) for d in mapping.outer]
    axis_ranges = [range(a.issues) for a in mapping.axes]
    for outer_point in itertools.product(*outer_ranges):
        base = dict(zip(mapping.outer, outer_point, strict=True))
        for issue in itertools.product(*axis_ranges):
            lengths = {}
            for axis, number in zip(mapping.axes, issue, strict=True):
                if axis.width is None:
                    lengths[axis.dim] = axis.extent
                elif axis.upto:  # vl: the last issue is shorter, not padded
                    lengths[axis.dim] = min(axis.width, axis.extent - number * axis.width)
                else:
                    lengths[axis.dim] = axis.width
            starts = {a.dim: n * (a.width or 0) for a, n in zip(mapping.axes, issue, strict=True)}
            points = list(itertools.product(*(range(lengths[d.name]) for d in semantics.domain)))
            kernel_points = [_kernel_point(base, starts, _named(semantics, p), axes, extents) for p in points]
            blocks = {}
            for access in (semantics.a, semantics.b):
                blocks[access.tensor] = _gather(access, expr.access(roles[access.tensor]),
                                                arrays[roles[access.tensor]], semantics, points, kernel_points)
            result = np.zeros(_block_shape(semantics.output, semantics, lengths))
            for point in points:
                values = _named(semantics, point)
                product = (blocks[semantics.a.tensor][_position(semantics.a, values)]
                           * blocks[semantics.b.tensor][_position(semantics.b, values)])
                result[_position(semantics.output, values)] += product
            _scatter(result, semantics.output, expr.output, out, semantics, points, kernel_points)
            issues += 1
            cycles += mapping.instruction.issue_cycles(lengths)
    return Simulation(out, issues, cycles)


def _named(semantics: TensorExpr, point: tuple[int, ...]) -> dict[str, int]:
    return {d.name: v for d, v in zip(semantics.domain, point, strict=True)}


def _position(access: Access, values: MappingOf[str, int]) -> tuple[int, ...]:
    return tuple(i.evaluate(values) for i in access.indices)


def _block_shape(access: Access, semantics: TensorExpr, lengths: MappingOf[str, int]) -> tuple[int, ...]:
    return tuple(i.span(lengths) for i in access.indices)


def _kernel_point(base: dict[str, int], starts: dict[str, int], lanes: dict[str, int], axes, extents
                  ) -> dict[str, int] | None:
    """Kernel dimension values of one instruction point; None on a padded lane."""
    values = dict(base)
    for dim, lane in lanes.items():
        axis = axes[dim]
        position = starts[dim] + lane
        if position >= axis.extent:
            return None
        for fused in reversed(axis.fused):
            values[fused] = position % extents[fused]
            position //= extents[fused]
    return values


def _gather(wanted: Access, access: Access, array: np.ndarray, semantics: TensorExpr, points, kernel_points
            ) -> np.ndarray:
    lengths = {d.name: max(p[i] for p in points) + 1 for i, d in enumerate(semantics.domain)}
    block = np.zeros(_block_shape(wanted, semantics, lengths))
    for point, values in zip(points, kernel_points, strict=True):
        if values is None:
            continue
        full = dict.fromkeys(_dims(access), 0) | values
        block[_position(wanted, _named(semantics, point))] = _read(access, array, full)
    return block


def _scatter(block: np.ndarray, wanted: Access, access: Access, out: np.ndarray, semantics: TensorExpr,
             points, kernel_points) -> None:
    """Adds each output element of the block once (several points share one output element)."""
    done = set()
    for point, values in zip(points, kernel_points, strict=True):
        if values is None:
            continue
        position = _position(wanted, _named(semantics, point))
        if position in done:
            continue
        done.add(position)
        out[tuple(i.evaluate(values) for i in access.indices)] += block[position]


def _dims(access: Access) -> tuple[str, ...]:
    return access.dims


def padded_issue_count(mapping: Mapping) -> int:
    return math.prod(a.issues for a in mapping.axes) * math.prod(mapping.kernel.expr.extents[d]
                                                                   for d in mapping.outer)
