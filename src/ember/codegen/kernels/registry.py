"""Kernel registries: what a native backend can run, how it chooses among its algorithms, and
how each kernel is printed. One registry per backend (the cpu backend's is C_KERNELS); a
library backend derives its own from it and overrides or adds entries, touching no core file.

A `Kernel` implements one or more instructions. Its functions:
  accepts(view) -> reason | None   can it run this op at all (looked at on graph nodes, to
                                   decide lowering and refusals, and on LIR instructions);
  applies(instr, options) -> bool  is it the algorithm to choose here (variants of one op are
                                   tried in registration order, the first that applies wins);
  plan(instr, options) -> KernelPlan  the decisions the `select-kernels` pass records in the
                                   LIR: parameters, packed weights, tables, scratch bytes;
  emit(emitter, instr) -> str      the C block (it only prints what the plan decided).
`preamble` is file-scope C a kernel needs once per program (declarations of a library's
functions). Imports lir/, types, graph and support only (not the emitter)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ember.lir.ir import Buffer, BufferKind, Instr
from ember.support.errors import EmberError
from ember.types import TensorType


@dataclass(frozen=True)
class OpView:
    """What `accepts` looks at: the same for a graph node and an LIR instruction, so one
    function decides both what the backend can run and, later, what it selects."""

    op: str
    attrs: Any
    results: tuple[TensorType, ...]
    operands: tuple[TensorType | None, ...]
    constant: tuple[bool, ...]  # per operand: its data is known at compile time
    source: str = ""

    def operand(self, index: int) -> TensorType:
        """The type of operand `index`, which must be present."""
        t = self.operands[index]
        if t is None:
            raise EmberError(f"node '{self.source}' ({self.op}): operand {index} is absent")
        return t

    @classmethod
    def of_node(cls, node: Any) -> OpView:
        from ember.graph import Constant

        return cls(node.op, node.attrs, tuple(v.type for v in node.outputs),
                   tuple(None if v is None else v.type for v in node.inputs),
                   tuple(isinstance(v, Constant) for v in node.inputs), node.name)

    @classmethod
    def of_instr(cls, instr: Instr) -> OpView:
        base = instr.base_operands
        results = len(instr.idef.op.results) if instr.idef.op is not None else 1
        ins = base[results:]
        return cls(instr.name, instr.attrs, tuple(b.type for b in base[:results] if b is not None),
                   tuple(None if b is None else b.type for b in ins),
                   tuple(is_whole_weight(b) for b in ins), instr.source)


def is_whole_weight(buffer: Buffer | None) -> bool:
    return buffer is not None and buffer.kind is BufferKind.WEIGHT and not buffer.is_view


@dataclass(frozen=True)
class KernelOptions:
    """The backend options kernel choice depends on."""

    num_threads: int = 1
    winograd: bool = True
    precision: str = "fp32"  # "bf16": convolutions and GEMMs with weights on bf16 kernels (gemm_bf16.py)
    # An ISA Mapper target description the host runs (e.g. "x86-avx512"): GEMMs where its
    # mapped kernels measured faster take them (gemm_mapped.py); None: hand-written only.
    mapped_target: str | None = None
    # The L2 cache of a core, which kernels that block for it size their blocks by: the host's
    # when compiling for it, else 1 MB (Zen 4's, where those kernels were first tuned).
    l2_bytes: int = 1 << 20
    # Measured kernel choices (ember/tuning.py): (instruction signature, kernel name)
    # pairs that override the cost model where the kernel can run the instruction; and, while
    # tuning, the round whose k-th feasible variant every instruction takes (None: not tuning).
    pinned: tuple[tuple[str, str], ...] = ()
    variant_round: int | None = None


@dataclass
class KernelPlan:
    """What selection decides for one instruction. `packed`: (source weight, layout, data)
    copies of weights made at compile time; `tables`: (key, layout, data) constant tables;
    `scratch_bytes`: working memory placed by the memory planner. Kernel operands follow the
    instruction's own in this order: packed weights, tables, scratch."""

    params: dict[str, Any] = field(default_factory=dict)
    packed: list[tuple[Buffer, str, np.ndarray]] = field(default_factory=list)
    tables: list[tuple[str, str, np.ndarray]] = field(default_factory=list)
    scratch_bytes: int = 0


def _accept_all(view: OpView) -> str | None:
    return None


def _always(instr: Instr, options: KernelOptions) -> bool:
    return True


def _no_plan(instr: Instr, options: KernelOptions) -> KernelPlan:
    return KernelPlan()


Emit = Callable[[Any, Instr], str]


@dataclass(frozen=True)
class Kernel:
    name: str
    ops: tuple[str, ...]
    emit: Emit
    accepts: Callable[[OpView], str | None] = _accept_all
    applies: Callable[[Instr, KernelOptions], bool] = _always
    plan: Callable[[Instr, KernelOptions], KernelPlan] = _no_plan
    # Whether the kernel can run the instruction at all, cost aside: the variants a measured
    # search (tune=True) times. None: where it applies (not a candidate beyond that).
    feasible: Callable[[Instr, KernelOptions], bool] | None = None
    preamble: str = ""
    # The kernel computes several graph ops, each of which ONNX rounds on its own: the C
    # compiler must not contract a product of one into a sum of the next (an FMA skips the
    # product's rounding, so a Mul that overflows to inf before a Sub gives inf, not NaN).
    rounds_each_op: bool = False


class KernelRegistry:
    """Kernels by name, and per instruction the variants in the order they are tried."""

    def __init__(self, name: str, kernels: Sequence[Kernel] = (),
                 precondition: Callable[[OpView], str | None] = _accept_all) -> None:
        """precondition: what every kernel needs (element types, say), checked first."""
        self.name = name
        self.precondition = precondition
        self._by_name: dict[str, Kernel] = {}
        self._by_op: dict[str, list[str]] = {}
        for k in kernels:
            self.add(k)

    def add(self, kernel: Kernel, *, first: bool = False) -> Kernel:
        """Registers `kernel`; with first=True it is tried before the variants already there."""
        if kernel.name in self._by_name:
            raise ValueError(f"kernel '{kernel.name}' is registered twice in {self.name}")
        self._by_name[kernel.name] = kernel
        for op in kernel.ops:
            names = self._by_op.setdefault(op, [])
            names.insert(0, kernel.name) if first else names.append(kernel.name)
        return kernel

    def replace(self, name: str, **changes: Any) -> Kernel:
        """Swaps fields of a registered kernel (e.g. its emit) keeping its place."""
        kernel = replace(self[name], **changes)
        self._by_name[name] = kernel
        return kernel

    def kernel(self, name: str, *ops: str, **fields: Any) -> Callable[[Emit], Emit]:
        """Decorator registering an emit function as kernel `name` for `ops`."""

        def register(emit: Emit) -> Emit:
            self.add(Kernel(name, ops, emit, **fields))
            return emit

        return register

    def derive(self, name: str) -> KernelRegistry:
        """A copy to override entries in (a library backend's registry)."""
        copy = KernelRegistry(name, precondition=self.precondition)
        copy._by_name = dict(self._by_name)
        copy._by_op = {op: list(names) for op, names in self._by_op.items()}
        return copy

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self._by_name[name]
        except KeyError:
            raise EmberError(f"{self.name} has no kernel '{name}'") from None

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def ops(self) -> set[str]:
        return {op for op, names in self._by_op.items() if names}

    def variants(self, op: str) -> list[Kernel]:
        return [self._by_name[n] for n in self._by_op.get(op, ())]

    def refusal(self, view: OpView) -> str | None:
        """Why no kernel runs `view` (None when one does)."""
        variants = self.variants(view.op)
        if variants:
            reason = self.precondition(view)
            if reason is not None:
                return reason
        if not variants:
            return f"no {self.name} kernel for {view.op}"
        reasons = [k.accepts(view) for k in variants]
        if any(r is None for r in reasons):
            return None
        return str(reasons[0])

    def candidates(self, instr: Instr, options: KernelOptions) -> list[Kernel]:
        """The variants that can run `instr` (accepted and feasible), in registration order:
        what a measured search chooses among."""
        view = OpView.of_instr(instr)
        found = []
        for kernel in self.variants(instr.name):
            if kernel.accepts(view) is not None:
                continue
            feasible = kernel.feasible or kernel.applies
            if feasible(instr, options):
                found.append(kernel)
        return found

    def select(self, instr: Instr, options: KernelOptions) -> tuple[Kernel, KernelPlan]:
        """The kernel for `instr` and its plan: a measured choice where options pin one, else
        the cost model's."""
        if options.pinned or options.variant_round is not None:
            tuned = self._tuned(instr, options)
            if tuned is not None:
                plan = tuned.plan(instr, options)
                plan.params["tuned"] = True
                return tuned, plan
        kernel = self.default_variant(instr, options)
        return kernel, kernel.plan(instr, options)

    def default_variant(self, instr: Instr, options: KernelOptions) -> Kernel:
        """The cost model's choice: the first variant that accepts `instr` and applies."""
        view = OpView.of_instr(instr)
        for kernel in self.variants(instr.name):
            if kernel.accepts(view) is None and kernel.applies(instr, options):
                return kernel
        reason = self.refusal(view) or "no variant applies (an Ember bug: accepts and applies disagree)"
        raise EmberError(f"node '{instr.source}' ({instr.name}): {reason}")

    def _tuned(self, instr: Instr, options: KernelOptions) -> Kernel | None:
        """The measured choice for `instr` (or this round's variant while tuning), where one
        of its candidates is that; None leaves it to the cost model."""
        candidates = self.candidates(instr, options)
        if len(candidates) < 2:
            return None
        if options.variant_round is not None:
            return candidates[options.variant_round] if options.variant_round < len(candidates) else None
        name = dict(options.pinned).get(instr_signature(instr, options))
        return next((k for k in candidates if k.name == name), None)


def instr_signature(instr: Instr, options: KernelOptions) -> str:
    """What a measured kernel choice depends on: the op, its operands' and results' types
    (and which operands are constant), its attributes and the thread count."""
    view = OpView.of_instr(instr)

    def types(values: Sequence[TensorType | None], constant: Sequence[bool]) -> str:
        return ",".join("-" if t is None else f"{t.dtype.name}{list(t.shape)}{'c' if c else ''}"
                        for t, c in zip(values, constant, strict=True))

    return (f"{instr.name}({types(view.operands, view.constant)})->({types(view.results, [False] * len(view.results))})"
            f" {instr.attrs!r} threads={options.num_threads}")


# Loop-nest helpers every C kernel family uses ---------------------------------------------


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
    for dim, stride in zip(in_shape, strides, strict=True):
        out.append(0 if dim == 1 else stride)
    return out


def collapse(shape: Sequence[int], strides_list: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """Merges adjacent axes that every operand walks contiguously, so loop nests stay shallow
    (an elementwise op over same-shaped tensors becomes one flat loop)."""
    dims = list(shape)
    strides = [list(s) for s in strides_list]
    keep = [i for i, d in enumerate(dims) if d != 1]
    dims = [dims[i] for i in keep]
    strides = [[s[i] for i in keep] for s in strides]
    out_dims: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for axis, dim in enumerate(dims):
        if out_dims and all(s[axis] * dim == o[-1] for s, o in zip(strides, out_strides, strict=True)):
            out_dims[-1] *= dim
            for s, o in zip(strides, out_strides, strict=True):
                o[-1] = s[axis]
            continue
        out_dims.append(dim)
        for s, o in zip(strides, out_strides, strict=True):
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
    for strides, _name in zip(strides_list, names, strict=True):
        terms = [f"{var}{axis} * {s}" if s != 1 else f"{var}{axis}" for axis, s in enumerate(strides) if s != 0]
        offsets.append(" + ".join(terms) if terms else "0")
    lines.append("    " * depth + body(offsets))
    for axis in range(depth - 1, -1, -1):
        lines.append("    " * axis + "}")
    return "\n".join(lines)
