"""The bundle's memory contract: three caller-provided regions and where each tensor lives.

    weights      the constant blob (raw and pre-packed weights), read-only, can live in flash
    io           the mutable region: every input, then every output, each at an offset
                 aligned to ALIGN bytes, in model order
    activations  the planned activation arena (the kernels' scratch is planned inside it)

One buffer per kind of memory, as in Glow's static bundle API. Imports lir, memory, types, codegen.emitter."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.codegen.c_types import c_type
from ember.codegen.emitter import ALIGN, CProgram
from ember.lir.ir import Buffer, Program
from ember.memory import MemoryPlan
from ember.support.names import sanitize_identifier
from ember.types import DType


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class TensorSlot:
    """One input or output inside the io region."""

    kind: str           # "input" or "output"
    index: int          # position in the model's inputs (outputs)
    name: str           # the model's name, sanitized: safe in C comments and strings
    dtype: DType
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    @property
    def ctype(self) -> str:
        return c_type(self.dtype)

    @property
    def dtype_name(self) -> str:
        return np.dtype(self.dtype.numpy).name

    @property
    def count(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def macro(self) -> str:
        """The part of this slot's macro names after the prefix: INPUT_0, OUTPUT_1."""
        return f"{self.kind.upper()}_{self.index}"


@dataclass(frozen=True)
class Layout:
    constant_bytes: int
    mutable_bytes: int
    arena_bytes: int
    inputs: tuple[TensorSlot, ...]
    outputs: tuple[TensorSlot, ...]
    # The memory planner's report on the arena.
    lower_bound_bytes: int
    unshared_bytes: int
    io_bytes: int           # the tensors' bytes, without alignment padding
    align: int = ALIGN

    @property
    def activation_bytes(self) -> int:
        return self.arena_bytes

    @property
    def efficiency(self) -> float:
        """Lower bound / arena: 1.0 means the arena wastes no byte to fragmentation."""
        return self.lower_bound_bytes / self.arena_bytes if self.arena_bytes else 1.0

    @property
    def slots(self) -> tuple[TensorSlot, ...]:
        return self.inputs + self.outputs


def plan_layout(program: Program, cprogram: CProgram, plan: MemoryPlan | None) -> Layout:
    offset = 0
    slots: dict[str, list[TensorSlot]] = {"input": [], "output": []}
    for kind, buffers in (("input", program.inputs), ("output", program.outputs)):
        for index, buffer in enumerate(buffers):
            slots[kind].append(_slot(kind, index, buffer, offset))
            offset = align(offset + buffer.type.nbytes)
    io_bytes = sum(b.type.nbytes for b in program.inputs + program.outputs)
    lower_bound = plan.lower_bound_bytes if plan is not None else cprogram.arena_bytes
    unshared = plan.unshared_bytes if plan is not None else cprogram.arena_bytes
    return Layout(constant_bytes=int(cprogram.weights.size), mutable_bytes=max(offset, ALIGN),
                  arena_bytes=align(cprogram.arena_bytes),
                  inputs=tuple(slots["input"]), outputs=tuple(slots["output"]),
                  lower_bound_bytes=lower_bound, unshared_bytes=unshared, io_bytes=io_bytes)


def _slot(kind: str, index: int, buffer: Buffer, offset: int) -> TensorSlot:
    return TensorSlot(kind, index, sanitize_identifier(buffer.name), buffer.type.dtype,
                      tuple(int(d) for d in buffer.type.shape), offset, int(buffer.type.nbytes))
