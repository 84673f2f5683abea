"""The low-level IR: an address-only instruction list over buffers.

Buffers are weights (constant data), inputs and outputs (placeholders bound at run time) and
activations, whose lifetimes `alloc` / `dealloc` mark. Every instruction operand is a buffer
qualified @in (read), @out (written) or @inout (read and written); the qualifiers decide which
memory optimizations are legal. There is no SSA and no control flow.

The instruction table INSTRS is derived from the op table: every op is one instruction
(backends lower the ops they do not run natively before irgen) whose results come first as
@out operands (Glow's convention), followed by its
operands as @in. Imports ops/, types and support/."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember.ops import OPS, NoAttrs, OpDef
from ember.support.errors import VerificationError
from ember.types import TensorType


class BufferKind(enum.Enum):
    WEIGHT = "weight"
    INPUT = "input"
    OUTPUT = "output"
    ACTIVATION = "activation"


class OperandKind(enum.Enum):
    IN = "@in"
    OUT = "@out"
    INOUT = "@inout"
    # A kernel's working memory: written and read only inside the instruction, dead after it.
    SCRATCH = "@scratch"

    @property
    def reads(self) -> bool:
        return self in (OperandKind.IN, OperandKind.INOUT)

    @property
    def writes(self) -> bool:
        return self is not OperandKind.IN


@dataclass(eq=False)
class Buffer:
    """A region of memory. `data` is set for weights only; `external_name` is the model's
    name for inputs and outputs. `offset` is the arena offset once memory is planned.

    A view (`view_of` set, always an activation) has no storage of its own: it is the bytes
    of `view_of` starting `view_offset` bytes in, typed as `type`. Its lifetime starts at a
    `view` instruction and ends at its `dealloc`; its base must be live meanwhile. Use
    resolve_address() to find where any buffer's bytes live."""

    name: str
    type: TensorType
    kind: BufferKind
    data: np.ndarray | None = None
    external_name: str | None = None
    offset: int | None = None
    view_of: Buffer | None = None
    view_offset: int = 0
    packing: Packing | None = None

    def constant(self) -> np.ndarray:
        """A weight's data (raises for a buffer without any)."""
        if self.data is None:
            raise VerificationError(f"buffer '{self.name}' has no constant data")
        return self.data

    @property
    def sigil(self) -> str:
        return "@" if self.kind is BufferKind.WEIGHT else "%"

    @property
    def is_view(self) -> bool:
        return self.view_of is not None

    def __repr__(self) -> str:
        return f"{self.sigil}{self.name}: {self.type}"


@dataclass(frozen=True, eq=False)
class Packing:
    """How a weight made at compile time was derived: `layout` names the transformation
    (e.g. "panels32", "winograd_f2x3", or a table like "direct_offsets") and `source` the
    weight it was computed from (None for a table computed from shapes alone). A kernel that
    reads a packed copy of a weight does not read the weight itself."""

    layout: str
    source: Buffer | None = None


def resolve_address(buffer: Buffer) -> tuple[Buffer, int]:
    """(root buffer, byte offset in it): the one place that follows view chains. The root
    is a weight, an input, an output or an activation with storage of its own (its arena
    offset is root.offset once planned)."""
    offset = 0
    while buffer.view_of is not None:
        offset += buffer.view_offset
        buffer = buffer.view_of
    return buffer, offset


def footprint(buffer: Buffer) -> tuple[Buffer, int, int]:
    """(root, first byte, one past the last byte) of the memory a buffer occupies."""
    root, offset = resolve_address(buffer)
    return root, offset, offset + buffer.type.nbytes


@dataclass(frozen=True)
class InstrDef:
    """One instruction: its operand kinds in order (the last repeats when `variadic`), the
    op whose semantics it has (None for alloc/dealloc/copy) and its attribute class."""

    name: str
    operand_kinds: tuple[OperandKind, ...]
    op: OpDef | None = None
    attrs: type = NoAttrs
    variadic: bool = False

    def kind_of(self, index: int) -> OperandKind:
        if self.variadic and index >= len(self.operand_kinds):
            return self.operand_kinds[-1]
        return self.operand_kinds[index]

    def kinds_of(self, count: int) -> list[OperandKind]:
        """The kinds of operands 0 .. count - 1 (kind_of for each, in one slice: passes ask
        this of every instruction, often)."""
        declared = self.operand_kinds
        if count <= len(declared):
            return list(declared[:count])
        if self.variadic:
            return [*declared, *(declared[-1],) * (count - len(declared))]
        return [self.kind_of(i) for i in range(count)]  # raises for the operand past the end


ALLOC, DEALLOC, COPY, VIEW = "alloc", "dealloc", "copy", "view"
# Lifetime markers: they move no data. `view` starts a view's life as `alloc` starts an
# activation's; its base and offset live on the view buffer itself.
MARKERS = frozenset({ALLOC, DEALLOC, VIEW})

INSTRS: dict[str, InstrDef] = {
    ALLOC: InstrDef(ALLOC, (OperandKind.OUT,)),
    DEALLOC: InstrDef(DEALLOC, (OperandKind.IN,)),
    COPY: InstrDef(COPY, (OperandKind.OUT, OperandKind.IN)),
    VIEW: InstrDef(VIEW, (OperandKind.OUT,)),
}


def _instr_from_op(op: OpDef) -> InstrDef:
    kinds = (OperandKind.OUT,) * len(op.results) + (OperandKind.IN,) * len(op.operands)
    return InstrDef(op.name, kinds, op, op.attrs, op.variadic)


def register_op_instrs() -> None:
    """Adds one instruction per op; idempotent, so ops defined later (plugins) can be picked
    up by calling it again."""
    for op in OPS.values():
        if op.name not in INSTRS:
            INSTRS[op.name] = _instr_from_op(op)


register_op_instrs()


@dataclass
class KernelUse:
    """What kernel selection chose for an instruction: the backend's kernel `name`, the
    decisions it took (`params`, e.g. the thread count), and the kinds of the operands the
    kernel adds after the instruction's own (packed weights @in, working memory @scratch)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    operand_kinds: tuple[OperandKind, ...] = ()


@dataclass(eq=False)
class Instr:
    """An instruction. `operands` are buffers (None for an absent optional operand); `source`
    names the graph node it came from, for comments and diagnostics. Once a kernel is
    selected, `kernel` says which, and its own operands follow the instruction's."""

    name: str
    operands: list[Buffer | None]
    attrs: Any = field(default_factory=NoAttrs)
    source: str = ""
    kernel: KernelUse | None = None

    @property
    def idef(self) -> InstrDef:
        return INSTRS[self.name]

    @property
    def base_count(self) -> int:
        """How many operands belong to the instruction itself (the rest are its kernel's)."""
        return len(self.operands) - (len(self.kernel.operand_kinds) if self.kernel else 0)

    @property
    def base_operands(self) -> list[Buffer | None]:
        return self.operands[:self.base_count]

    def operand(self, index: int) -> Buffer:
        """Operand `index`, which must be present (not an absent optional operand)."""
        buffer = self.operands[index]
        if buffer is None:
            raise VerificationError(f"{self.name} (node '{self.source}'): operand {index} is absent")
        return buffer

    def required(self) -> list[Buffer]:
        """The instruction's own operands, every one present (ops without optional operands)."""
        base = self.base_operands
        for i, buffer in enumerate(base):
            if buffer is None:
                self.operand(i)  # raises, naming the operand
        return base  # type: ignore[return-value]  # every one checked present

    @property
    def kernel_operands(self) -> list[Buffer]:
        return [b for b in self.operands[self.base_count:] if b is not None]

    def kinds(self) -> list[OperandKind]:
        base = self.idef.kinds_of(self.base_count)
        return base + list(self.kernel.operand_kinds) if self.kernel else base

    def outputs(self) -> list[Buffer]:
        return [b for b, k in zip(self.operands, self.kinds(), strict=True) if b is not None and k.writes]

    def inputs(self) -> list[Buffer]:
        return [b for b, k in zip(self.operands, self.kinds(), strict=True) if b is not None and k.reads]


@dataclass
class Program:
    """One compiled function: its buffers and its instruction list."""

    name: str
    weights: list[Buffer] = field(default_factory=list)
    inputs: list[Buffer] = field(default_factory=list)
    outputs: list[Buffer] = field(default_factory=list)
    instrs: list[Instr] = field(default_factory=list)

    def activations(self) -> list[Buffer]:
        """Activations with storage of their own (the ones the memory planner places)."""
        return [i.operand(0) for i in self.instrs if i.name == ALLOC]

    def views(self) -> list[Buffer]:
        return [i.operand(0) for i in self.instrs if i.name == VIEW]

    def buffers(self) -> list[Buffer]:
        return self.weights + self.inputs + self.outputs + self.activations() + self.views()

    def weight_bytes(self) -> int:
        return sum(b.type.nbytes for b in self.weights)

    def compute_instrs(self) -> list[Instr]:
        return [i for i in self.instrs if i.name not in MARKERS]
