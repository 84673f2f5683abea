"""The mapper: every legal way a kernel's iteration space lands on one instruction.

A mapping pairs the instruction's operands with the kernel's (the output with the output, the
two inputs either way round, element types equal or made equal by a described fix-up), then
gives each instruction dimension an ordered group of kernel dimensions of the same class,
fused row-major. A dimension's class is the set of operands its index expressions use (TVM's
buffer mask, tinygrad's in0/in1/reduce ranges), so spatial matches spatial and reduction
matches reduction: for `C[j] += A[] * B[j]` the kernel dimension on `j` must index the output
and the B operand but not A. Kernel dimensions left over become loops around the instruction;
a reduction dimension left over, or one longer than the instruction's, is a reduction split
across instructions (the instruction accumulates).

Each mapping then states what it costs to make legal:
- padding: a fused extent that is not a multiple of a fixed instruction extent is padded up
  (`<=N` extents take a shorter last issue; `*` takes any length);
- layout: the elements one issue reads of each operand must lie where the instruction expects
  them (row-major over its indices, so a vector's lanes are unit-stride). That is checked by
  address arithmetic on the kernel's row-major tensors; where it fails the operand is packed
  (at compile time for a constant weight) or, when the dimensions sit in window indices like
  `oh*2 + kh`, expanded by im2col; a zero-padded operand read in place needs a padded copy.

Imports isa.expr, isa.describe, isa.kernels, types and support/."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ember.isa.describe import Fixup, Instruction
from ember.isa.expr import Access, TensorExpr
from ember.isa.kernels import Kernel

# Bounds on the enumeration, visible in the dump: fused groups of at most this many kernel
# dimensions per instruction dimension, and at most this many mappings kept per instruction.
MAX_FUSED = 3
MAX_MAPPINGS = 64


@dataclass(frozen=True)
class AxisMap:
    """Instruction dimension `dim` runs over the kernel dimensions `fused` (row-major, outer
    first; empty: nothing maps there, the instruction runs at extent 1 padded)."""

    dim: str
    fused: tuple[str, ...]
    extent: int                 # product of the fused kernel extents
    width: int | None           # the instruction's extent (None: any length)
    upto: bool = False

    @property
    def issues(self) -> int:
        """Issues of the instruction along this dimension."""
        if self.width is None:
            return 1
        return math.ceil(self.extent / self.width)

    @property
    def padded(self) -> int:
        """Kernel points the instruction computes along this dimension, padding included."""
        if self.width is None or self.upto:
            return self.extent
        return self.issues * self.width

    def __str__(self) -> str:
        source = "·".join(self.fused) if self.fused else "(none)"
        text = f"{self.dim}<-{source}"
        if self.width is not None and not self.upto and self.padded != self.extent:
            text += f" (pad {self.extent}->{self.padded})"
        return text


@dataclass(frozen=True)
class LayoutChange:
    """What must be done to an operand before the instruction can read it. kind: 'pack'
    (reorder into the instruction's blocks), 'im2col' (expand window indices), 'pad' (copy
    with the zero border), 'fixup' (an element-type rewrite); at_compile_time: a constant's,
    done once when compiling."""

    tensor: str
    kind: str
    detail: str
    at_compile_time: bool = False

    def __str__(self) -> str:
        return f"{self.kind} {self.tensor}{' (compile time)' if self.at_compile_time else ''}: {self.detail}"


@dataclass(frozen=True)
class Mapping:
    kernel: Kernel
    instruction: Instruction
    roles: tuple[tuple[str, str], ...]      # instruction operand -> kernel tensor
    axes: tuple[AxisMap, ...]
    outer: tuple[str, ...]                  # kernel dimensions looped around the instruction
    layout: tuple[LayoutChange, ...]
    fixups: tuple[Fixup, ...]

    @property
    def lossy(self) -> bool:
        return any(f.lossy for f in self.fixups)

    @property
    def issues(self) -> int:
        """Instruction issues for one run of the kernel (padding included)."""
        extents = self.kernel.expr.extents
        total = math.prod(extents[d] for d in self.outer)
        return total * math.prod(a.issues for a in self.axes)

    @property
    def utilisation(self) -> float:
        """Useful multiply-accumulates over those the issued instructions perform."""
        lanes = math.prod(a.width if a.width is not None and not a.upto else 1 for a in self.axes)
        streamed = math.prod(a.extent for a in self.axes if a.width is None or a.upto)
        done = self.issues * lanes * streamed / math.prod(a.issues for a in self.axes if a.width is None or a.upto)
        return self.kernel.expr.iterations / done if done else 0.0

    @property
    def splits(self) -> tuple[str, ...]:
        """Kernel reduction dimensions accumulated across issues."""
        reductions = set(self.kernel.expr.reduction_dims)
        split = [d for d in self.outer if d in reductions]
        split += [d for a in self.axes for d in a.fused if d in reductions and a.issues > 1]
        return tuple(split)

    def role(self, instruction_operand: str) -> str:
        return dict(self.roles)[instruction_operand]

    def __str__(self) -> str:
        roles = " ".join(f"{i}={k}" for i, k in self.roles)
        axes = ", ".join(str(a) for a in self.axes)
        parts = [f"{self.instruction.name} [{roles}] {axes}", f"outer {','.join(self.outer) or '-'}",
                 f"util {self.utilisation:.0%}"]
        if self.splits:
            parts.append(f"split-reduction {','.join(self.splits)}")
        if self.lossy:
            parts.append("LOSSY")
        text = " | ".join(parts)
        for change in self.layout:
            text += f"\n    {change}"
        return text


@dataclass(frozen=True)
class Rejection:
    instruction: str
    reason: str

    def __str__(self) -> str:
        return f"{self.instruction}: {self.reason}"


def _dim_class(expr: TensorExpr, names: dict[str, str]) -> dict[str, frozenset[str]]:
    """Each dimension -> the (renamed) operands whose indices use it."""
    classes: dict[str, set[str]] = {d.name: set() for d in expr.domain}
    for access in expr.operands:
        for dim in access.dims:
            classes[dim].add(names[access.tensor])
    return {d: frozenset(c) for d, c in classes.items()}


def _groups(candidates: list[str]) -> list[tuple[str, ...]]:
    """Non-empty subsets of `candidates` (kept in domain order), at most MAX_FUSED long."""
    groups: list[tuple[str, ...]] = []
    for size in range(1, min(len(candidates), MAX_FUSED) + 1):
        groups.extend(itertools.combinations(candidates, size))
    return groups


def map_kernel(kernel: Kernel, instruction: Instruction, *, allow_lossy: bool = True
               ) -> tuple[list[Mapping], list[Rejection]]:
    """The legal mappings of `kernel` onto `instruction` (best first: exact before lossy,
    fewer run-time layout changes, higher utilisation), and why pairings were refused."""
    expr, semantics = kernel.expr, instruction.semantics
    mappings: list[Mapping] = []
    rejections: list[Rejection] = []
    for first, second in ((expr.a, expr.b), (expr.b, expr.a)):
        pairs = ((semantics.output, expr.output), (semantics.a, first), (semantics.b, second))
        roles = tuple((i.tensor, k.tensor) for i, k in pairs)
        fixups, refusal = _element_types(pairs, instruction, allow_lossy)
        if refusal:
            rejections.append(Rejection(instruction.name, f"[{_roles(roles)}] {refusal}"))
            continue
        names = {k: i for i, k in roles}
        kernel_class = _dim_class(expr, names)
        instruction_class = _dim_class(semantics, {a.tensor: a.tensor for a in semantics.operands})
        options: list[list[tuple[str, ...]]] = []
        for dim in semantics.domain:
            candidates = [d.name for d in expr.domain if kernel_class[d.name] == instruction_class[dim.name]]
            options.append(_groups(candidates) or [()])
        found = 0
        for choice in itertools.product(*options):
            used = [d for group in choice for d in group]
            if len(used) != len(set(used)):
                continue
            if all(not group for group in choice):
                continue
            mapping = _build(kernel, instruction, roles, choice, fixups)
            mappings.append(mapping)
            found += 1
        if not found:
            rejections.append(Rejection(instruction.name, f"[{_roles(roles)}] no kernel dimension has the class "
                                                           f"of any instruction dimension"))
    mappings.sort(key=_rank)
    return mappings[:MAX_MAPPINGS], rejections


def _roles(roles: tuple[tuple[str, str], ...]) -> str:
    return " ".join(f"{i}={k}" for i, k in roles)


def _rank(mapping: Mapping) -> tuple:
    run_time = sum(1 for c in mapping.layout if not c.at_compile_time)
    return (mapping.lossy, run_time, -round(mapping.utilisation, 6), mapping.issues, str(mapping))


def _element_types(pairs, instruction: Instruction, allow_lossy: bool) -> tuple[tuple[Fixup, ...], str]:
    fixups = []
    for wanted, given in pairs:
        if wanted.dtype is given.dtype:
            continue
        fixup = next((f for f in instruction.fixups if f.operand == wanted.tensor and f.source is given.dtype), None)
        if fixup is None or (fixup.lossy and not allow_lossy):
            return (), (f"element types differ: {wanted.tensor} is {wanted.dtype.value}, kernel {given.tensor} "
                        f"is {given.dtype.value}{' (only a lossy fix-up)' if fixup else ''}")
        fixups.append(fixup)
    return tuple(fixups), ""


def _shape(access: Access, extents: dict[str, int]) -> tuple[int, ...]:
    return tuple(index.span(extents) for index in access.indices)


def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def _build(kernel: Kernel, instruction: Instruction, roles, choice, fixups) -> Mapping:
    expr, semantics = kernel.expr, instruction.semantics
    extents = expr.extents
    axes = tuple(AxisMap(dim.name, group, math.prod(extents[d] for d in group), dim.extent, dim.upto)
                 for dim, group in zip(semantics.domain, choice, strict=True))
    mapped = {d for group in choice for d in group}
    outer = tuple(d.name for d in expr.domain if d.name not in mapped)
    layout = [LayoutChange(dict(roles)[f.operand], "fixup", f"as {f.operand}: {f.how}",
                           dict(roles)[f.operand] in kernel.constants) for f in fixups]
    axis_of = {a.dim: a for a in axes}
    for instruction_access in semantics.operands:
        tensor = dict(roles)[instruction_access.tensor]
        change = _layout(kernel, tensor, instruction_access, axis_of, extents)
        if change is not None:
            layout.append(change)
    return Mapping(kernel, instruction, roles, axes, outer, tuple(layout), fixups)


def _layout(kernel: Kernel, tensor: str, wanted: Access, axis_of: dict[str, AxisMap],
            extents: dict[str, int]) -> LayoutChange | None:
    """None when one issue's elements of `tensor` already lie as the instruction reads them,
    else the change that puts them there."""
    access = kernel.expr.access(tensor)
    strides = _strides(_shape(access, extents))
    constant = tensor in kernel.constants
    # One issue's block: each instruction index over its width ('*' counts 1, '<=N' N), capped
    # by the fused extent (the padded lanes are zero-filled, not read).
    instruction_dims = list(wanted.dims)
    widths = []
    for dim in instruction_dims:
        axis = axis_of[dim]
        width = 1 if axis.width is None else axis.width
        widths.append(min(width, axis.extent) if axis.fused else 1)
    block_shape = tuple(index.span(dict(zip(instruction_dims, widths, strict=True))) for index in wanted.indices)
    block_strides = _strides(block_shape)
    base = None
    ordered = True
    for point in itertools.product(*(range(w) for w in widths)):
        values = dict.fromkeys(kernel.expr.extents, 0)
        for dim, value in zip(instruction_dims, point, strict=True):
            axis = axis_of[dim]
            remaining = value
            for fused in reversed(axis.fused):
                values[fused] = remaining % extents[fused]
                remaining //= extents[fused]
        address = sum(i.evaluate(values) * s for i, s in zip(access.indices, strides, strict=True))
        expected = sum(i.evaluate(dict(zip(instruction_dims, point, strict=True))) * s
                       for i, s in zip(wanted.indices, block_strides, strict=True))
        base = address if base is None else base
        if address - base != expected:
            ordered = False
            break
    ordered = ordered and all(_straddles_nothing(access, strides, axis_of[d], extents) for d in instruction_dims)
    if ordered:
        if tensor in kernel.padded and not constant:
            return LayoutChange(tensor, "pad", "copy into a zero-bordered buffer (or peel the border)")
        return None
    lanes = ",".join(f"{d}<-{'·'.join(axis_of[d].fused) or '-'}" for d in instruction_dims)
    window = any(axis_of[d].fused and any(len(i.terms) > 1 and set(i.dims) & set(axis_of[d].fused)
                                          for i in access.indices) for d in instruction_dims)
    if window and not constant:
        return LayoutChange(tensor, "im2col", f"expand the window indices into {wanted.tensor} blocks ({lanes})")
    return LayoutChange(tensor, "pack", f"reorder into contiguous {wanted.tensor} blocks ({lanes})", constant)


def _straddles_nothing(access: Access, strides: tuple[int, ...], axis: AxisMap, extents: dict[str, int]) -> bool:
    """The first block checks one issue's addresses; a fused group must also keep every later
    block in order. It does where the group is one linear run of addresses, or where each run
    (the dims inside a break in strides) holds whole blocks."""
    if len(axis.fused) < 2 or axis.width is None:
        return True
    dim_strides = [sum(i.coefficient(d) * s for i, s in zip(access.indices, strides, strict=True))
                   for d in axis.fused]
    run = extents[axis.fused[-1]]
    for position in range(len(axis.fused) - 2, -1, -1):
        inner = axis.fused[position + 1]
        if dim_strides[position] != extents[inner] * dim_strides[position + 1]:
            return run % axis.width == 0 or run >= axis.extent
        run *= extents[axis.fused[position]]
    return True


def gemm_view(expr: TensorExpr) -> str:
    """The kernel read as a (batched) GEMM, from its dimension classes: batch dims index all
    three operands, M the output and the first input, N the output and the second, K both
    inputs. Window indices (a dimension inside a sum) need an im2col to be a GEMM."""
    names = {expr.output.tensor: "O", expr.a.tensor: "A", expr.b.tensor: "B"}
    classes = _dim_class(expr, names)
    extents = expr.extents
    groups: dict[str, list[str]] = {"batch": [], "M": [], "N": [], "K": []}
    kinds = {frozenset("OAB"): "batch", frozenset("OA"): "M", frozenset("OB"): "N", frozenset("AB"): "K"}
    for dim in expr.domain:
        kind = kinds.get(classes[dim.name])
        if kind is None:
            return f"not a GEMM: {dim.name} indexes {''.join(sorted(classes[dim.name]))}"
        groups[kind].append(dim.name)

    def size(kind: str) -> str:
        dims = groups[kind]
        return f"{'·'.join(dims)} ({math.prod(extents[d] for d in dims)})" if dims else "1"

    windows = sorted({d for access in expr.operands for i in access.indices if len(i.terms) > 1 for d in i.dims})
    text = f"GEMM M={size('M')} N={size('N')} K={size('K')}"
    if groups["batch"]:
        text = f"batched over {size('batch')}: " + text
    if groups["N"] == [] or groups["M"] == []:
        text += " (a matrix-vector product per batch)"
    if windows:
        text += f"; window indices over {','.join(windows)}: im2col, or a direct convolution"
    return text
